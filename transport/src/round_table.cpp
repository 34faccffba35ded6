#include "round_table.hpp"

#include "cgp/common/wire/codec.hpp"

namespace cgp::transport::detail {

PendingRound::PendingRound(coordinator::RoundReplies& replies, std::size_t slots)
    : settled_slot_(slots, false), replies_(replies) {}

bool PendingRound::expect_slot(const std::string& id, Slot slot) {
  std::lock_guard lock(mutex_);
  if (!slot_of_device_.emplace(id, slot).second) return false;
  ++awaited_;
  return true;
}

bool PendingRound::expect(const std::string& id, std::size_t k, const void* session) {
  return expect_slot(id, Slot{k, session});
}

bool PendingRound::expect_queued(const std::string& id, std::size_t k) {
  return expect_slot(id, Slot{k, nullptr, true});
}

bool PendingRound::deliver_queued(std::string_view id, const void* session) {
  std::lock_guard lock(mutex_);
  if (!open_) return false;
  auto slot = slot_of_device_.find(id);
  if (slot == slot_of_device_.end() || !slot->second.queued || settled_slot_[slot->second.k])
    return false;
  slot->second.queued = false;
  slot->second.session = session;
  return true;
}

bool PendingRound::requeue(std::string_view id, const void* session) {
  std::lock_guard lock(mutex_);
  if (!open_) return false;
  auto slot = slot_of_device_.find(id);
  if (slot == slot_of_device_.end() || slot->second.session != session ||
      settled_slot_[slot->second.k])
    return false;
  slot->second.queued = true;
  slot->second.session = nullptr;
  return true;
}

void PendingRound::settle(std::size_t k) {
  if (settled_slot_[k]) return;
  settled_slot_[k] = true;
  if (--awaited_ == 0) settled_.notify_all();
}

void PendingRound::give_up(std::size_t k) {
  std::lock_guard lock(mutex_);
  settle(k);
}

void PendingRound::give_up_all() {
  std::lock_guard lock(mutex_);
  awaited_ = 0;
  open_ = false;
}

Delivery PendingRound::take(std::string_view device_id, const v1::DeviceReply& reply) {
  std::lock_guard lock(mutex_);
  if (!open_) return {};  // first: the ids the slots point to may be gone once closed
  auto slot = slot_of_device_.find(device_id);
  if (slot == slot_of_device_.end() || settled_slot_[slot->second.k]) return {};
  Delivery delivery{true, coordinator::ReplyDefect::none, replies_.output_dimension};
  delivery.defect =
      coordinator::record_reply(wire::reply_from_wire(reply), slot->second.k, replies_);
  settle(slot->second.k);
  return delivery;
}

void PendingRound::device_gone(std::string_view device_id, const void* session) {
  std::lock_guard lock(mutex_);
  if (!open_) return;
  auto slot = slot_of_device_.find(device_id);
  if (slot != slot_of_device_.end() && slot->second.session == session) settle(slot->second.k);
}

bool PendingRound::wait_until(std::chrono::steady_clock::time_point deadline, std::size_t& left) {
  std::unique_lock lock(mutex_);
  const bool settled = settled_.wait_until(lock, deadline, [&] { return awaited_ == 0; });
  left = awaited_;
  return settled;
}

void PendingRound::close() {
  std::lock_guard lock(mutex_);
  if (!open_) return;
  open_ = false;
  for (const auto& [id, slot] : slot_of_device_)
    if (slot.queued && !settled_slot_[slot.k])
      replies_.kind[slot.k] = coordinator::ReplyKind::not_delivered;
}

std::size_t PendingRound::awaited() {
  std::lock_guard lock(mutex_);
  return awaited_;
}

bool PendingRound::is_open() {
  std::lock_guard lock(mutex_);
  return open_;
}

bool RoundTable::open(const Key& key, const std::shared_ptr<PendingRound>& round) {
  std::lock_guard lock(mutex_);
  return rounds_.emplace(key, round).second;
}

void RoundTable::close(const Key& key, PendingRound& round) {
  {
    std::lock_guard lock(mutex_);
    auto it = rounds_.find(key);
    if (it != rounds_.end() && it->second.get() == &round) rounds_.erase(it);
  }
  round.close();
}

Delivery RoundTable::deliver(std::string_view device_id, const v1::DeviceReply& reply) {
  std::shared_ptr<PendingRound> round;
  {
    std::lock_guard lock(mutex_);
    auto it = rounds_.find(
        std::pair<std::string_view, std::uint32_t>{reply.id().query_id(), reply.id().round()});
    if (it != rounds_.end()) round = it->second;
  }
  return round ? round->take(device_id, reply) : Delivery{};
}

void RoundTable::device_gone(std::string_view device_id, const void* session) {
  std::vector<std::shared_ptr<PendingRound>> open;
  {
    std::lock_guard lock(mutex_);
    open.reserve(rounds_.size());
    for (const auto& [key, round] : rounds_) open.push_back(round);
  }
  for (const auto& round : open) round->device_gone(device_id, session);
}

}  // namespace cgp::transport::detail

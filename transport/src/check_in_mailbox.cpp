#include "check_in_mailbox.hpp"

#include <utility>

namespace cgp::transport::detail {

void CheckInMailbox::post(const std::string& device_id, const std::shared_ptr<PendingRound>& round,
                          v1::CoordinatorToDevice message) {
  std::lock_guard lock(mutex_);
  letters_[device_id].push_back(Letter{round, std::move(message)});
}

std::vector<CheckInMailbox::Letter> CheckInMailbox::collect(const std::string& device_id) {
  std::lock_guard lock(mutex_);
  auto it = letters_.find(device_id);
  if (it == letters_.end()) return {};
  std::vector<Letter> out = std::move(it->second);
  letters_.erase(it);
  return out;
}

void CheckInMailbox::sweep() {
  std::lock_guard lock(mutex_);
  for (auto it = letters_.begin(); it != letters_.end();) {
    auto& letters = it->second;
    std::erase_if(letters, [](const Letter& letter) {
      const auto round = letter.round.lock();
      return !round || !round->is_open();
    });
    it = letters.empty() ? letters_.erase(it) : std::next(it);
  }
}

}  // namespace cgp::transport::detail

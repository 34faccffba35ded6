#include "stream_registry.hpp"

#include <algorithm>

#include "connection_admission.hpp"

namespace cgp::transport::detail {
namespace {

void count_down(std::map<std::string, std::size_t, std::less<>>& counts, const std::string& key) {
  auto it = counts.find(key);
  if (it != counts.end() && --it->second == 0) counts.erase(it);
}

std::size_t count_of(const std::map<std::string, std::size_t, std::less<>>& counts,
                     const std::string& key) {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second;
}

}  // namespace

StreamRegistry::StreamRegistry(StreamCaps caps, std::string kind)
    : caps_(caps), kind_(std::move(kind)), reaper_([this] { reap(); }) {}

StreamRegistry::~StreamRegistry() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  reaper_.join();
}

std::string StreamRegistry::admit(BoundedStream& stream, const std::string& peer) {
  std::string address = peer_address(peer);
  std::lock_guard lock(mutex_);
  if (refusing_ || stopping_) return kind_ + "-stopping";
  if (streams_.size() >= caps_.total) return kind_ + "-total-cap";
  if (count_of(per_address_, address) >= caps_.per_address) return kind_ + "-address-cap";
  if (count_of(per_connection_, peer) >= caps_.per_connection) return kind_ + "-connection-cap";
  stream.connection = peer;
  stream.address = std::move(address);
  stream.ends_at = std::chrono::steady_clock::now() + caps_.lifetime;
  ++per_address_[stream.address];
  ++per_connection_[stream.connection];
  streams_.insert(&stream);
  return {};
}

void StreamRegistry::hold(BoundedStream& stream) {
  std::lock_guard lock(mutex_);
  if (streams_.count(&stream)) stream.ends_at = std::chrono::steady_clock::time_point::max();
}

void StreamRegistry::renew(BoundedStream& stream) {
  std::lock_guard lock(mutex_);
  if (streams_.count(&stream)) stream.ends_at = std::chrono::steady_clock::now() + caps_.lifetime;
}

void StreamRegistry::forget(BoundedStream& stream) {
  std::lock_guard lock(mutex_);
  if (streams_.erase(&stream) == 0) return;
  count_down(per_address_, stream.address);
  count_down(per_connection_, stream.connection);
}

void StreamRegistry::end_all(const grpc::Status& status) {
  std::lock_guard lock(mutex_);
  refusing_ = true;
  for (auto* stream : streams_) stream->end(status);
}

std::size_t StreamRegistry::open() const {
  std::lock_guard lock(mutex_);
  return streams_.size();
}

void StreamRegistry::reap() {
  // A quarter of the lifetime between looks (at most 1 s): a stream ends at most that late.
  const auto tick = std::clamp<std::chrono::milliseconds>(
      caps_.lifetime / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, tick, [this] { return stopping_; });
    const auto now = std::chrono::steady_clock::now();
    for (auto* stream : streams_)
      if (stream->ends_at <= now)
        stream->end(grpc::Status(grpc::StatusCode::OK, "lifetime over: open the stream again"));
  }
}

}  // namespace cgp::transport::detail

// Which device is connected on which stream, and which devices are revoked: one lock for both,
// so that a Hello admitted while its device is being revoked cannot slip in between.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cgp::transport::detail {

class Session;

class SessionRegistry {
 public:
  struct Attached {
    bool revoked = false;               // not attached: the device was revoked meanwhile
    std::shared_ptr<Session> replaced;  // a reconnecting device's old stream, to be finished
  };
  // A device's stream once its Hello was accepted; it replaces the device's older stream.
  Attached attach(const std::shared_ptr<Session>& session);
  // Forgets `session` unless a newer stream of its device replaced it; false then.
  bool detach(const std::shared_ptr<Session>& session);

  std::shared_ptr<Session> find(const std::string& id) const;
  // Many lookups under one lock (a round's): out[k] = the session of *id_of(k), null when
  // id_of(k) is null or the device is not connected.
  template <class IdOf>
  void find_many(std::size_t count, IdOf&& id_of,
                 std::vector<std::shared_ptr<Session>>& out) const {
    out.assign(count, nullptr);
    std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < count; ++k) {
      const std::string* id = id_of(k);
      if (!id) continue;
      auto it = sessions_.find(*id);
      if (it != sessions_.end()) out[k] = it->second;
    }
  }
  std::vector<std::shared_ptr<Session>> all() const;
  std::size_t size() const;
  bool wait_for(std::size_t count, std::chrono::milliseconds timeout) const;

  // From now on the device is refused; returns its stream (to be finished), if connected.
  // `newly` is false when it was revoked before.
  std::shared_ptr<Session> revoke(const std::string& id, bool& newly);
  bool is_revoked(std::string_view id) const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_;
  std::set<std::string, std::less<>> revoked_;
};

}  // namespace cgp::transport::detail

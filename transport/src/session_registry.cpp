#include "session_registry.hpp"

#include "device_session.hpp"

namespace cgp::transport::detail {

SessionRegistry::Attached SessionRegistry::attach(const std::shared_ptr<Session>& session) {
  Attached out;
  {
    std::lock_guard lock(mutex_);
    if (revoked_.count(session->id()) > 0) {
      out.revoked = true;
      return out;
    }
    auto& slot = sessions_[session->id()];
    out.replaced = std::move(slot);
    slot = session;
  }
  changed_.notify_all();
  return out;
}

bool SessionRegistry::detach(const std::shared_ptr<Session>& session) {
  bool removed = false;
  {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(session->id());
    if (it != sessions_.end() && it->second == session) {
      sessions_.erase(it);
      removed = true;
    }
  }
  if (removed) changed_.notify_all();
  return removed;
}

std::shared_ptr<Session> SessionRegistry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Session>> SessionRegistry::all() const {
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard lock(mutex_);
  out.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) out.push_back(session);
  return out;
}

std::size_t SessionRegistry::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

bool SessionRegistry::wait_for(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return sessions_.size() >= count; });
}

std::shared_ptr<Session> SessionRegistry::revoke(const std::string& id, bool& newly) {
  std::shared_ptr<Session> connected;
  {
    std::lock_guard lock(mutex_);
    newly = revoked_.insert(id).second;
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      connected = std::move(it->second);
      sessions_.erase(it);
    }
  }
  changed_.notify_all();
  return connected;
}

bool SessionRegistry::is_revoked(std::string_view id) const {
  std::lock_guard lock(mutex_);
  return revoked_.find(id) != revoked_.end();
}

}  // namespace cgp::transport::detail

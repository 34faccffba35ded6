#include "session_registry.hpp"

#include "device_session.hpp"

namespace cgp::transport::detail {

void SessionRegistry::set_credentials(std::map<std::string, CredentialSha256> digests) {
  std::lock_guard lock(mutex_);
  checked_ = !digests.empty();
  credentials_.clear();
  for (auto& [id, digest] : digests) credentials_.emplace(id, digest);
}

SessionRegistry::Admission SessionRegistry::admission_of(std::string_view id) const {
  Admission out;
  std::lock_guard lock(mutex_);
  out.revoked = revoked_.find(id) != revoked_.end();
  out.checked = checked_;
  if (auto it = credentials_.find(id); it != credentials_.end()) out.digest = it->second;
  return out;
}

SessionRegistry::Attached SessionRegistry::attach(
    const std::shared_ptr<DeviceStream>& session,
    const std::optional<CredentialSha256>& admitted_with) {
  Attached out;
  {
    std::lock_guard lock(mutex_);
    if (revoked_.count(session->id()) > 0) {
      out.revoked = true;
      return out;
    }
    if (checked_) {
      auto now = credentials_.find(session->id());
      if (now == credentials_.end() || !admitted_with || now->second != *admitted_with) {
        out.credential_changed = true;
        return out;
      }
    }
    auto& slot = sessions_[session->id()];
    out.replaced = std::move(slot);
    slot = session;
  }
  changed_.notify_all();
  return out;
}

bool SessionRegistry::detach(const std::shared_ptr<DeviceStream>& session) {
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

std::shared_ptr<DeviceStream> SessionRegistry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<DeviceStream>> SessionRegistry::all() const {
  std::vector<std::shared_ptr<DeviceStream>> out;
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

std::shared_ptr<DeviceStream> SessionRegistry::revoke(const std::string& id, bool& newly) {
  std::shared_ptr<DeviceStream> connected;
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

SessionRegistry::Enrolment SessionRegistry::enrol(const std::string& id,
                                                  const CredentialSha256& digest) {
  Enrolment out;
  {
    std::lock_guard lock(mutex_);
    const bool was_revoked = revoked_.erase(id) > 0;
    auto [slot, added] = credentials_.try_emplace(id, digest);
    const bool other_credential = !added && slot->second != digest;
    slot->second = digest;
    out.admitted = was_revoked || added;
    out.replaced = !out.admitted && other_credential;
    // A stream admitted with the old credential: ended, so that only the new one works.
    if (other_credential) {
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        out.ended = std::move(it->second);
        sessions_.erase(it);
      }
    }
  }
  if (out.ended) changed_.notify_all();
  return out;
}

}  // namespace cgp::transport::detail

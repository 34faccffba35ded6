// Which device is connected on which stream, which devices are revoked and which credential
// each must present: one lock for all three, so that a Hello admitted while its device is being
// revoked, or while its credential is being changed, cannot slip in between.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cgp/transport/credentials.hpp"

namespace cgp::transport::detail {

class DeviceStream;

class SessionRegistry {
 public:
  // The credentials devices present in Hello, by id, as a gateway starts. None at all: no
  // credential is ever checked (loopback tests), also of devices enrolled later.
  void set_credentials(std::map<std::string, CredentialSha256> digests);

  // What a Hello with this id must present: refused whatever it presents (revoked), nothing
  // (credentials are not checked), or the credential its secret must hash to (none: not
  // enrolled, refused).
  struct Admission {
    bool revoked = false;
    bool checked = true;
    std::optional<CredentialSha256> digest;
  };
  Admission admission_of(std::string_view id) const;

  struct Attached {
    bool revoked = false;  // not attached: the device was revoked meanwhile
    // Not attached: the device's credential changed since its Hello was admitted with
    // `admitted_with` (the old one must stop working at once).
    bool credential_changed = false;
    std::shared_ptr<DeviceStream> replaced;  // a reconnecting device's old stream, to be finished
  };
  // A device's stream once its Hello was accepted with the credential `admitted_with` (its
  // Admission::digest); it replaces the device's older stream.
  Attached attach(const std::shared_ptr<DeviceStream>& session,
                  const std::optional<CredentialSha256>& admitted_with);
  // Forgets `session` unless a newer stream of its device replaced it; false then.
  bool detach(const std::shared_ptr<DeviceStream>& session);

  std::shared_ptr<DeviceStream> find(const std::string& id) const;
  // Many lookups under one lock (a round's): out[k] = the session of *id_of(k), null when
  // id_of(k) is null or the device is not connected.
  template <class IdOf>
  void find_many(std::size_t count, IdOf&& id_of,
                 std::vector<std::shared_ptr<DeviceStream>>& out) const {
    out.assign(count, nullptr);
    std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < count; ++k) {
      const std::string* id = id_of(k);
      if (!id) continue;
      auto it = sessions_.find(*id);
      if (it != sessions_.end()) out[k] = it->second;
    }
  }
  std::vector<std::shared_ptr<DeviceStream>> all() const;
  std::size_t size() const;
  bool wait_for(std::size_t count, std::chrono::milliseconds timeout) const;

  // From now on the device is refused; returns its stream (to be finished), if connected.
  // `newly` is false when it was revoked before.
  std::shared_ptr<DeviceStream> revoke(const std::string& id, bool& newly);
  bool is_revoked(std::string_view id) const;
  // From now on `id` is admitted with this credential, a revoked id included.
  struct Enrolment {
    bool admitted = false;  // new, or revoked before: it may connect now
    bool replaced = false;  // enrolled and not revoked, with another credential before
    std::shared_ptr<DeviceStream> ended;  // its stream under the old credential, to be finished
  };
  Enrolment enrol(const std::string& id, const CredentialSha256& digest);

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::unordered_map<std::string, std::shared_ptr<DeviceStream>> sessions_;
  std::set<std::string, std::less<>> revoked_;
  std::map<std::string, CredentialSha256, std::less<>> credentials_;
  bool checked_ = false;  // credentials_ was not empty at start
};

}  // namespace cgp::transport::detail

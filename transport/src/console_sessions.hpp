// The console's browser sessions: an analyst signs in once with the analyst credential and the
// browser then carries a session cookie, so that the credential is not kept in the page. Every
// request that changes something (POST, DELETE) made with the cookie must also carry the
// session's CSRF token in a header, which a page from another origin cannot read or send: the
// cookie alone (which a browser attaches to any site's form) proves nothing.
//
// Tokens are 256 random bits from libsodium. Sessions are kept by the SHA-256 of their token,
// so that looking one up compares digests of secrets, not secrets, and the store holds no
// token a memory dump could replay. Bounded: at most `max_sessions` (the oldest goes first),
// each ending after `idle` without use or `lifetime` after sign-in, whichever comes first.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace cgp::transport::detail {

struct ConsoleSessionLimits {
  std::size_t max_sessions = 256;
  std::chrono::seconds idle{60 * 60};
  std::chrono::seconds lifetime{12 * 60 * 60};
};

class ConsoleSessions {
 public:
  using Clock = std::chrono::steady_clock;
  using Limits = ConsoleSessionLimits;
  struct Opened {
    std::string token;  // the cookie's value: 64 hex digits
    std::string csrf;   // the header's value: 64 hex digits
  };

  explicit ConsoleSessions(Limits limits = {}) : limits_(limits) {}

  // A new session (after the credential was checked).
  Opened open(Clock::time_point now);
  // The session's CSRF token, if `token` names a live one (which then counts as used now).
  std::optional<std::string> find(std::string_view token, Clock::time_point now);
  // Ends the session `token` names; false if there was none.
  bool close(std::string_view token);
  std::size_t size() const;

  // Does `presented` equal `expected` (constant time in their contents)?
  static bool csrf_matches(std::string_view presented, std::string_view expected);

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Session {
    std::string csrf;
    Clock::time_point opened, used;
  };
  static Digest digest_of(std::string_view token);
  void drop_expired(Clock::time_point now);

  const Limits limits_;
  mutable std::mutex mutex_;
  std::map<Digest, Session> sessions_;
};

}  // namespace cgp::transport::detail

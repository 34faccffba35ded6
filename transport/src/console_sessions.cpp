#include "console_sessions.hpp"

#include <sodium.h>

#include <algorithm>

namespace cgp::transport::detail {

namespace {

std::string random_hex() {
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof bytes);
  char text[2 * sizeof bytes + 1];
  sodium_bin2hex(text, sizeof text, bytes, sizeof bytes);
  return text;
}

}  // namespace

ConsoleSessions::Digest ConsoleSessions::digest_of(std::string_view token) {
  Digest digest;
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(token.data()),
                     token.size());
  return digest;
}

void ConsoleSessions::drop_expired(Clock::time_point now) {
  std::erase_if(sessions_, [&](const auto& entry) {
    const Session& s = entry.second;
    return now - s.used >= limits_.idle || now - s.opened >= limits_.lifetime;
  });
}

ConsoleSessions::Opened ConsoleSessions::open(Clock::time_point now) {
  Opened opened{random_hex(), random_hex()};
  std::lock_guard lock(mutex_);
  drop_expired(now);
  while (!sessions_.empty() && sessions_.size() >= limits_.max_sessions) {
    const auto oldest = std::min_element(
        sessions_.begin(), sessions_.end(),
        [](const auto& a, const auto& b) { return a.second.opened < b.second.opened; });
    sessions_.erase(oldest);
  }
  sessions_[digest_of(opened.token)] = Session{opened.csrf, now, now};
  return opened;
}

std::optional<std::string> ConsoleSessions::find(std::string_view token, Clock::time_point now) {
  if (token.empty()) return std::nullopt;
  std::lock_guard lock(mutex_);
  drop_expired(now);
  const auto it = sessions_.find(digest_of(token));
  if (it == sessions_.end()) return std::nullopt;
  it->second.used = now;
  return it->second.csrf;
}

bool ConsoleSessions::close(std::string_view token) {
  std::lock_guard lock(mutex_);
  return sessions_.erase(digest_of(token)) != 0;
}

std::size_t ConsoleSessions::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

bool ConsoleSessions::csrf_matches(std::string_view presented, std::string_view expected) {
  return !expected.empty() && presented.size() == expected.size() &&
         sodium_memcmp(presented.data(), expected.data(), expected.size()) == 0;
}

}  // namespace cgp::transport::detail

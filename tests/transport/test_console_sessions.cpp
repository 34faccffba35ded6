// The console's session store: tokens, CSRF tokens, expiry and the bound.
#include <catch2/catch.hpp>

#include <set>

#include "console_sessions.hpp"

using cgp::transport::detail::ConsoleSessions;
using namespace std::chrono_literals;

TEST_CASE("console sessions: a token finds its CSRF token until it expires or is closed",
          "[transport][console]") {
  ConsoleSessions sessions({/*max_sessions=*/4, /*idle=*/60s, /*lifetime=*/600s});
  const auto t0 = ConsoleSessions::Clock::time_point{} + 1000h;
  const auto a = sessions.open(t0);
  CHECK(a.token.size() == 64);
  CHECK(a.csrf.size() == 64);
  CHECK(a.token != a.csrf);
  REQUIRE(sessions.find(a.token, t0 + 1s) == a.csrf);
  CHECK_FALSE(sessions.find(a.token + "0", t0 + 1s));
  CHECK_FALSE(sessions.find("", t0 + 1s));
  CHECK_FALSE(sessions.find(a.csrf, t0 + 1s));  // the CSRF token is no session token

  // Used every 50 s it stays alive past one idle period, but not past its lifetime.
  for (auto t = t0 + 50s; t < t0 + 600s; t += 50s) REQUIRE(sessions.find(a.token, t));
  CHECK_FALSE(sessions.find(a.token, t0 + 600s));

  // Idle for 60 s: gone.
  const auto b = sessions.open(t0);
  CHECK(sessions.find(b.token, t0 + 59s));
  CHECK_FALSE(sessions.find(b.token, t0 + 59s + 60s));

  const auto c = sessions.open(t0);
  CHECK(sessions.close(c.token));
  CHECK_FALSE(sessions.close(c.token));
  CHECK_FALSE(sessions.find(c.token, t0));
}

TEST_CASE("console sessions: bounded, the oldest goes first, tokens are distinct",
          "[transport][console]") {
  ConsoleSessions sessions({/*max_sessions=*/3, /*idle=*/3600s, /*lifetime=*/3600s});
  const auto t0 = ConsoleSessions::Clock::time_point{} + 1000h;
  std::vector<ConsoleSessions::Opened> opened;
  std::set<std::string> tokens;
  for (int i = 0; i < 5; ++i) {
    opened.push_back(sessions.open(t0 + std::chrono::seconds(i)));
    tokens.insert(opened.back().token);
    tokens.insert(opened.back().csrf);
    CHECK(sessions.size() <= 3);
  }
  CHECK(tokens.size() == 10);
  CHECK_FALSE(sessions.find(opened[0].token, t0 + 10s));
  CHECK_FALSE(sessions.find(opened[1].token, t0 + 10s));
  for (int i = 2; i < 5; ++i) CHECK(sessions.find(opened[i].token, t0 + 10s));
}

TEST_CASE("console sessions: CSRF tokens compare whole", "[transport][console]") {
  CHECK(ConsoleSessions::csrf_matches("abcd", "abcd"));
  CHECK_FALSE(ConsoleSessions::csrf_matches("abce", "abcd"));
  CHECK_FALSE(ConsoleSessions::csrf_matches("abc", "abcd"));
  CHECK_FALSE(ConsoleSessions::csrf_matches("abcde", "abcd"));
  CHECK_FALSE(ConsoleSessions::csrf_matches("", ""));
}

// A flood wrote one log line per refused stream (~4.6 MB from 50,000). The
// refusal log writes 20 a second per reason and says how many it held back.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "refusal_log.hpp"

using cgp::transport::detail::RefusalLog;

TEST_CASE("refusal log: a flood is a few lines a second and one count of the rest",
          "[transport][limits]") {
  std::vector<std::string> lines;
  {
    RefusalLog log([&](const std::string& line) { lines.push_back(line); });
    const auto t0 = RefusalLog::Clock::now();
    for (int i = 0; i < 5000; ++i)
      log.refused("credential", "event=refused reason=credential device=d" + std::to_string(i),
                  t0 + std::chrono::microseconds(i));
    log.refused("no-hello", "event=refused reason=no-hello", t0);  // its own allowance
    CHECK(lines.size() == RefusalLog::kLinesPerSecond + 1);
    CHECK(lines.front() == "event=refused reason=credential device=d0");
    // The next second: the count of what was held back, then lines again.
    log.refused("credential", "event=refused reason=credential device=late",
                t0 + std::chrono::milliseconds(1500));
    REQUIRE(lines.size() == RefusalLog::kLinesPerSecond + 3);
    CHECK(lines[lines.size() - 2].rfind("event=refused-suppressed reason=credential count=" +
                                            std::to_string(5000 - RefusalLog::kLinesPerSecond) +
                                            " seconds=",
                                        0) == 0);
    CHECK(lines.back() == "event=refused reason=credential device=late");
    for (int i = 0; i < 30; ++i)
      log.refused("credential", "x", t0 + std::chrono::milliseconds(1600));
  }
  // What was held back when the log ends is said too.
  CHECK(lines.back().rfind("event=refused-suppressed reason=credential count=" +
                               std::to_string(30 - (RefusalLog::kLinesPerSecond - 1)),
                           0) == 0);
}

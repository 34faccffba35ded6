// Refusals in the event log, rate-limited and aggregated: a flood made one line
// per refused stream (~4.6 MB from 50,000). Per reason, the first kLinesPerSecond lines of each
// second are written as they come; the rest are counted and said in one line,
// `event=refused-suppressed reason=R count=N seconds=S`, when the next refusal of that reason
// comes after the second is over (or at the latest when the log is destroyed).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace cgp::transport::detail {

class RefusalLog {
 public:
  static constexpr std::uint64_t kLinesPerSecond = 20;
  using Clock = std::chrono::steady_clock;
  explicit RefusalLog(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}
  ~RefusalLog();
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  // `line` is the whole event line ("event=refused reason=... ..."); `reason` groups it.
  void refused(std::string_view reason, const std::string& line,
               Clock::time_point now = Clock::now());
  // The same, with the line built only if it is written: a caller that names many devices at
  // once (a round's missing replies) does no string work for the lines the limit drops.
  template <class MakeLine>
  void refused_built(std::string_view reason, MakeLine&& make_line,
                     Clock::time_point now = Clock::now()) {
    if (!sink_) return;
    std::lock_guard lock(mutex_);
    if (take_line(reason, now)) sink_(make_line());
  }

 private:
  struct Window {
    Clock::time_point start;
    std::uint64_t written = 0, suppressed = 0;
  };
  void flush(const std::string& reason, Window& window, Clock::time_point now);
  // Under mutex_: whether this second still has a line for `reason` (else it is counted).
  bool take_line(std::string_view reason, Clock::time_point now);
  std::function<void(const std::string&)> sink_;
  std::mutex mutex_;
  std::map<std::string, Window, std::less<>> windows_;
};

}  // namespace cgp::transport::detail

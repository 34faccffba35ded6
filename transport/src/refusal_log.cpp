#include "refusal_log.hpp"

namespace cgp::transport::detail {

RefusalLog::~RefusalLog() {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  for (auto& [reason, window] : windows_) flush(reason, window, now);
}

void RefusalLog::flush(const std::string& reason, Window& window, Clock::time_point now) {
  if (window.suppressed == 0 || !sink_) return;
  const double seconds = std::chrono::duration<double>(now - window.start).count();
  sink_("event=refused-suppressed reason=" + reason +
        " count=" + std::to_string(window.suppressed) + " seconds=" + std::to_string(seconds));
  window.suppressed = 0;
}

void RefusalLog::refused(std::string_view reason, const std::string& line, Clock::time_point now) {
  if (!sink_) return;
  std::lock_guard lock(mutex_);
  if (take_line(reason, now)) sink_(line);
}

bool RefusalLog::take_line(std::string_view reason, Clock::time_point now) {
  auto found = windows_.find(reason);
  if (found == windows_.end()) found = windows_.emplace(std::string(reason), Window{now}).first;
  Window& window = found->second;
  if (now - window.start >= std::chrono::seconds(1)) {
    flush(found->first, window, now);
    window.start = now;
    window.written = 0;
  }
  if (window.written < kLinesPerSecond) {
    ++window.written;
    return true;
  }
  ++window.suppressed;
  return false;
}

}  // namespace cgp::transport::detail

// The coordinator's view of its watches (README "Watches"): which devices each watch was sent
// to, what each answered (armed, refused, rejected) and the one alert each may send. It holds
// nothing private: every entry is something a device chose to send.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {

class WatchBoard {
 public:
  // After each change, one call at a time and in order: (watch id, "", serialized WatchReport)
  // for a new watch, (watch id, device id, serialized DeviceWatch) for one device's change.
  using Observer = std::function<void(const std::string&, const std::string&, const std::string&)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  // A watch as a report kept from before describes it; invalid_argument "watches" for a
  // report that does not parse or names no watch, already_exists for a used id.
  Status restore(const std::string& report_bytes);
  // A new watch over these devices (user index, device id); already_exists for a used id.
  Status add(const v1::WatchSpec& spec,
             const std::vector<std::pair<std::uint32_t, std::string>>& devices);
  // The start_watch messages a device gets when it connects (at `now`, unix seconds): every
  // watch it is in that it has not answered, while the schedule runs (arming one that has
  // ended would charge for nothing), and every one it armed without an alert, until a day
  // after the end (a replay is free, and makes the device send an alert the coordinator may
  // have missed).
  std::vector<v1::WatchSpec> for_device(const std::string& device_id, double now) const;
  // What a device sent; ignored unless the watch includes that device. An armed device stays
  // armed (a later error is a failed replay, not a refusal).
  void started(const std::string& device_id, const v1::WatchStarted& started);
  // An alert: accepted (true) only from a device of the watch that has not refused or rejected
  // it, once, for a tick in 1..horizon that is due by now (with a minute for clock skew).
  bool alerted(const std::string& device_id, const v1::WatchAlert& alert, double now);
  // invalid_argument "watch_id" for an unknown id.
  Expected<v1::WatchReport> report(const std::string& watch_id) const;

 private:
  struct Entry {
    v1::WatchSpec spec;
    std::vector<v1::DeviceWatch> devices;
    std::map<std::string, std::size_t, std::less<>> index;  // device id → devices[k]
  };
  v1::DeviceWatch* find(const std::string& watch_id, const std::string& device_id);
  v1::WatchReport report_locked(const std::string& watch_id) const;
  mutable std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> watches_;
  std::map<std::string, std::vector<std::string>, std::less<>> by_device_;
  Observer observer_;
};

}  // namespace cgp::transport::detail

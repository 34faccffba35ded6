#include "watch_board.hpp"

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp::transport::detail {
namespace {

constexpr double kClockSkew = 60;        // seconds a device's clock may run ahead of ours
constexpr double kResendWindow = 86400;  // armed devices get a watch again this long after it ends

double schedule_end(const v1::WatchSpec& spec) {
  return spec.start_unix_seconds() + static_cast<double>(spec.horizon()) * spec.tick_seconds();
}

}  // namespace

Status WatchBoard::restore(const std::string& report_bytes) {
  v1::WatchReport report;
  if (!report.ParseFromString(report_bytes) || report.watch_id().empty() ||
      report.spec().watch_id() != report.watch_id())
    return make_error(ErrorCode::invalid_argument, "watches",
                      "watches: a kept watch report does not parse");
  std::lock_guard lock(mutex_);
  if (watches_.count(report.watch_id()) > 0)
    return make_error(ErrorCode::already_exists, "watch_id",
                      "watch_id '" + report.watch_id() + "' was already used");
  Entry entry;
  entry.spec = report.spec();
  for (const v1::DeviceWatch& device : report.devices()) {
    if (entry.index.count(device.device_id()) > 0) continue;
    entry.index.emplace(device.device_id(), entry.devices.size());
    entry.devices.push_back(device);
    by_device_[device.device_id()].push_back(report.watch_id());
  }
  watches_.emplace(report.watch_id(), std::move(entry));
  return {};
}

Status WatchBoard::add(const v1::WatchSpec& spec,
                       const std::vector<std::pair<std::uint32_t, std::string>>& devices) {
  std::lock_guard lock(mutex_);
  if (watches_.count(spec.watch_id()) > 0)
    return make_error(ErrorCode::already_exists, "watch_id",
                      "watch_id '" + spec.watch_id() + "' was already used");
  Entry entry;
  entry.spec = spec;
  for (const auto& [user, id] : devices) {
    if (entry.index.count(id) > 0) continue;
    v1::DeviceWatch device;
    device.set_device_id(id);
    device.set_user(user);
    entry.index.emplace(id, entry.devices.size());
    entry.devices.push_back(std::move(device));
    by_device_[id].push_back(spec.watch_id());
  }
  watches_.emplace(spec.watch_id(), std::move(entry));
  if (observer_) observer_(spec.watch_id(), "", report_locked(spec.watch_id()).SerializeAsString());
  return {};
}

std::vector<v1::WatchSpec> WatchBoard::for_device(const std::string& device_id, double now) const {
  std::lock_guard lock(mutex_);
  std::vector<v1::WatchSpec> out;
  auto ids = by_device_.find(device_id);
  if (ids == by_device_.end()) return out;
  for (const std::string& watch_id : ids->second) {
    const Entry& entry = watches_.find(watch_id)->second;
    const v1::DeviceWatch& device = entry.devices[entry.index.find(device_id)->second];
    const double end = schedule_end(entry.spec);
    const bool send = device.alert_tick() == 0 &&
                      ((device.state() == v1::DEVICE_WATCH_PENDING && now < end) ||
                       (device.state() == v1::DEVICE_WATCH_ARMED && now < end + kResendWindow));
    if (send) out.push_back(entry.spec);
  }
  return out;
}

v1::DeviceWatch* WatchBoard::find(const std::string& watch_id, const std::string& device_id) {
  auto entry = watches_.find(watch_id);
  if (entry == watches_.end()) return nullptr;
  auto k = entry->second.index.find(device_id);
  if (k == entry->second.index.end()) return nullptr;
  return &entry->second.devices[k->second];
}

void WatchBoard::started(const std::string& device_id, const v1::WatchStarted& started) {
  std::lock_guard lock(mutex_);
  v1::DeviceWatch* device = find(started.watch_id(), device_id);
  if (!device || device->alert_tick() != 0) return;
  if (device->state() == v1::DEVICE_WATCH_ARMED) return;  // a replay's error changes nothing
  switch (started.status()) {
    case v1::WATCH_ARMED:
      device->set_state(v1::DEVICE_WATCH_ARMED);
      break;
    case v1::WATCH_REFUSED_BUDGET:
      device->set_state(v1::DEVICE_WATCH_REFUSED);
      break;
    default:
      device->set_state(v1::DEVICE_WATCH_REJECTED);
      device->set_error(started.error());
      device->set_error_message(wire::cut_utf8(started.error_message(), 400));
      break;
  }
  if (observer_) observer_(started.watch_id(), device_id, device->SerializeAsString());
}

bool WatchBoard::alerted(const std::string& device_id, const v1::WatchAlert& alert, double now) {
  std::lock_guard lock(mutex_);
  v1::DeviceWatch* device = find(alert.watch_id(), device_id);
  // The first alert counts (a device re-sends it after a reconnect); a tick beyond the horizon
  // or not yet due cannot come from a device that follows the protocol.
  if (!device || device->alert_tick() != 0 || alert.tick() == 0) return false;
  if (device->state() == v1::DEVICE_WATCH_REFUSED || device->state() == v1::DEVICE_WATCH_REJECTED)
    return false;
  const v1::WatchSpec& spec = watches_.find(alert.watch_id())->second.spec;
  if (alert.tick() > spec.horizon()) return false;
  const double due =
      spec.start_unix_seconds() + static_cast<double>(alert.tick() - 1) * spec.tick_seconds();
  if (due > now + kClockSkew) return false;
  device->set_state(v1::DEVICE_WATCH_ARMED);
  device->set_alert_tick(alert.tick());
  device->set_alert_received_unix_seconds(now);
  if (observer_) observer_(alert.watch_id(), device_id, device->SerializeAsString());
  return true;
}

Expected<v1::WatchReport> WatchBoard::report(const std::string& watch_id) const {
  std::lock_guard lock(mutex_);
  if (watches_.find(watch_id) == watches_.end())
    return make_error(ErrorCode::invalid_argument, "watch_id",
                      "watch_id '" + watch_id + "' is not a watch of this coordinator");
  return report_locked(watch_id);
}

v1::WatchReport WatchBoard::report_locked(const std::string& watch_id) const {
  const Entry& entry = watches_.find(watch_id)->second;
  v1::WatchReport out;
  out.set_watch_id(watch_id);
  *out.mutable_spec() = entry.spec;
  std::uint32_t counts[4] = {0, 0, 0, 0}, alerts = 0;
  for (const v1::DeviceWatch& device : entry.devices) {
    *out.add_devices() = device;
    ++counts[static_cast<int>(device.state()) & 3];
    alerts += device.alert_tick() != 0;
  }
  out.set_pending(counts[v1::DEVICE_WATCH_PENDING]);
  out.set_armed(counts[v1::DEVICE_WATCH_ARMED]);
  out.set_refused(counts[v1::DEVICE_WATCH_REFUSED]);
  out.set_rejected(counts[v1::DEVICE_WATCH_REJECTED]);
  out.set_alerts(alerts);
  return out;
}

}  // namespace cgp::transport::detail

#include "cgp/link/device_client.hpp"
#include "cgp/common/version.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "coordinator_stream.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/link/watch_admission.hpp"
#include "cgp/link/watch_schedule.hpp"
#include "cgp/protocol/channel_settings.hpp"
#include "cgp/v1/device_gateway.grpc.pb.h"

namespace cgp::link {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The watches a device serves on its stream: each armed watch with a public schedule is ticked
// at the tick due now (ticks missed while the device was off or disconnected are skipped), and
// its one alert goes up the stream. Calls into the device are serialized with the request path
// (a Device is one thread at a time).
class WatchTicker {
 public:
  using Send = std::function<bool(v1::DeviceToCoordinator)>;
  WatchTicker(client::Device& device, std::mutex& device_mutex, WatchLimits limits, Send send)
      : device_(device), device_mutex_(device_mutex), limits_(limits), send_(std::move(send)) {
    thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  }
  ~WatchTicker() {
    thread_.request_stop();
    changed_.notify_all();
  }

  // A start_watch from the coordinator: arm (or replay), answer, and schedule it.
  bool start(const v1::WatchSpec& message) {
    const std::string bytes = wire::serialize(message);
    std::size_t ticking = 0;
    {
      std::lock_guard lock(mutex_);
      ticking = watches_.size();
    }
    WatchAnswer answer;
    {
      std::lock_guard lock(device_mutex_);
      answer = answer_start_watch(
          device_, {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, limits_,
          ticking, unix_now());
    }
    v1::DeviceToCoordinator started;
    if (!started.mutable_watch_started()->ParseFromString(answer.started) ||
        !send_(std::move(started)))
      return false;
    if (answer.recorded_alert() != 0) return send_alert(answer.watch_id, answer.recorded_alert());
    if (!answer.ticks()) return true;
    {
      std::lock_guard lock(mutex_);
      watches_.add(answer.watch_id, answer.state->spec, answer.state->last_tick);
      ++generation_;
    }
    changed_.notify_all();
    return true;
  }

 private:
  bool send_alert(const std::string& watch_id, std::uint64_t tick) {
    v1::DeviceToCoordinator alert;
    alert.mutable_watch_alert()->set_watch_id(watch_id);
    alert.mutable_watch_alert()->set_tick(tick);
    return send_(std::move(alert));
  }

  void run(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
      try {
        // The device is called without this lock (start() may add a watch meanwhile).
        watches_.tick_due(unix_now(), [&](const std::string& id, std::uint64_t tick) {
          lock.unlock();
          Expected<WatchTickStatus> status = WatchTickStatus::finished;
          {
            std::lock_guard device_lock(device_mutex_);
            status = device_.tick_watch(id, tick);
          }
          bool sent = true;
          if (status && *status == WatchTickStatus::alert) sent = send_alert(id, tick);
          lock.lock();
          return sent && status && *status == WatchTickStatus::silent;
        });
      } catch (...) {
        // Out of memory in the middle of a tick: the ledger holds what was decided; the
        // next pass tries again.
        if (!lock.owns_lock()) lock.lock();
      }
      const auto wait = std::chrono::duration<double>(
          std::max(watches_.next_due(unix_now()) - unix_now(), 0.001));
      // A new watch (start() bumps the generation) ends the wait at once.
      const std::uint64_t seen = generation_;
      changed_.wait_for(lock, stop, std::chrono::duration_cast<std::chrono::nanoseconds>(wait),
                        [&] { return generation_ != seen; });
    }
  }

  client::Device& device_;
  std::mutex& device_mutex_;
  WatchLimits limits_;
  Send send_;
  std::mutex mutex_;
  std::uint64_t generation_ = 0;
  std::condition_variable_any changed_;
  WatchSchedule watches_;
  std::jthread thread_;  // last: stopped and joined before the members it uses go
};

// The coordinator's frame, from its Welcome: kept by the device, and the device's lon/lat (if
// it has one) projected with it into "location". Every outcome here depends on public data
// only — the frame and whether the app gives lon/lat — never on the fix (FrameProjection
// places every valid fix). A device with lon/lat cannot serve a coordinator that announces no
// frame, or a frame a device does not take (Mercator); a device answering in the metres its
// app gives needs no frame and ignores one it cannot take.
Status apply_frame(const v1::Welcome& welcome, const DeviceConnection& connection,
                   client::Device& device, std::mutex& device_mutex) {
  CGP_ASSIGN_OR_RETURN(auto frame, wire::frame_from_wire(welcome.frame()));
  const auto current_lonlat = [&] {
    return connection.lonlat_now ? connection.lonlat_now() : connection.lonlat;
  };
  auto lonlat = current_lonlat();
  if (!frame) {
    if (!lonlat) return {};
    return make_error(ErrorCode::invalid_argument, "frame",
                      "frame: the coordinator announces no location frame, so lon/lat cannot be "
                      "projected; give the location in its metres instead");
  }
  for (;;) {
    {
      std::lock_guard lock(device_mutex);
      const Status taken = device.set_location_frame(*frame);
      if (!taken && lonlat) return taken;
      if (taken && lonlat) {
        const auto [lon, lat] = *lonlat;
        CGP_RETURN_IF_ERROR(device.set_location_lonlat("location", lon, lat));
      }
    }
    // A fix given meanwhile, while the device had no frame yet, was kept but not projected by
    // its giver: project it now, so that an older fix never stands in for it.
    auto latest = current_lonlat();
    if (latest == lonlat) return {};
    lonlat = std::move(latest);
  }
}

}  // namespace

Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device) {
  DeviceConnection connection;
  connection.coordinator_address = coordinator_address;
  connection.device_id = device_id;
  return serve_device(connection, device);
}

Status serve_device(const DeviceConnection& connection, client::Device& device) {
  return detail::serve_session(connection, device).status;
}

namespace detail {

SessionEnd serve_session(const DeviceConnection& connection, client::Device& device) {
  const std::string coordinator_address = dial_target(connection).name_address;
  const std::string& device_id = connection.device_id;
  if (!device.secure_randomness() && !connection.allow_simulation_randomness)
    return make_error(ErrorCode::invalid_argument, "randomness",
                      "randomness: device " + device_id +
                          " draws its noise from a simulation generator, which a coordinator "
                          "could predict; serve it only in a test "
                          "(DeviceConnection::allow_simulation_randomness)");
  // The id the coordinator accepts, checked before anything is dialled: an id of other bytes
  // (not UTF-8, say) made protobuf log an error per message and the coordinator end the stream
  // with an empty message. Final: the same id fails every time.
  if (device_id.empty() || device_id.size() > wire::kMaxIdBytes)
    return make_error(ErrorCode::invalid_argument, "device_id",
                      "device_id must have 1 to " + std::to_string(wire::kMaxIdBytes) +
                          " bytes, got " + std::to_string(device_id.size()));
  for (std::size_t i = 0; i < device_id.size(); ++i)
    if (!wire::is_id_char(static_cast<unsigned char>(device_id[i])))
      return make_error(ErrorCode::invalid_argument, "device_id",
                        "device_id may hold only A-Z a-z 0-9 . _ - : @ / +, not byte " +
                            std::to_string(i) + " (value " +
                            std::to_string(static_cast<unsigned char>(device_id[i])) + ")");
  if (Status target = check_dial_target(connection); !target) return target.error();
  auto dialled = connection.transport == DeviceTransport::frames ? dial_frames(connection)
                                                                 : dial_grpc(connection);
  if (!dialled) {
    // A stop asked while dialling ends serving without error, as it does later.
    if (connection.stop.stop_requested()) return {};
    return dialled.error();
  }
  std::unique_ptr<CoordinatorStream> stream = std::move(*dialled);
  // A watchdog cancels the stream when the caller asks to stop (connection.stop), and when a
  // coordinator accepts the connection but never welcomes the device (a stalled connection, an
  // overloaded server), after 10 s, so that the caller can dial again.
  std::mutex watch_mutex;
  std::condition_variable_any watch_changed;
  bool welcomed = false, gave_up = false;
  // Check-in mode: when the stream last carried a request or reply, and whether one is being
  // answered now: the watchdog never cancels in the middle of an answer (its charge and its
  // reply stay together), and once it has cancelled no new answer begins.
  auto last_activity = std::chrono::steady_clock::now();
  bool answering = false, cancelled = false;
  std::stop_callback wake_on_stop(connection.stop, [&] {
    std::lock_guard lock(watch_mutex);
    watch_changed.notify_all();
  });
  std::jthread watchdog([&](std::stop_token done) {
    std::unique_lock lock(watch_mutex);
    const auto stopped = [&] { return connection.stop.stop_requested(); };
    const auto cancel = [&] {  // with watch_mutex held
      cancelled = true;
      stream->cancel();
    };
    if (!watch_changed.wait_for(lock, done, std::chrono::seconds(10),
                                [&] { return welcomed || stopped(); })) {
      if (done.stop_requested()) return;
      gave_up = true;
      cancel();
      return;
    }
    if (connection.check_in_idle.count() > 0) {
      // Check-in: leave once quiet for check_in_idle (cancelling an idle stream loses nothing).
      last_activity = std::chrono::steady_clock::now();
      while (!stopped() && !done.stop_requested()) {
        if (answering) {
          watch_changed.wait(lock, done, [&] { return !answering || stopped(); });
          continue;
        }
        const auto quiet_until = last_activity + connection.check_in_idle;
        if (!watch_changed.wait_until(lock, done, quiet_until, [&] {
              return stopped() || answering ||
                     last_activity + connection.check_in_idle > quiet_until;
            })) {
          if (done.stop_requested()) return;
          cancel();
          return;
        }
      }
    }
    if (!stopped()) watch_changed.wait(lock, done, stopped);
    if (!stopped()) return;
    // Asked to stop: an answer in progress is finished and sent first.
    watch_changed.wait(lock, done, [&] { return !answering; });
    if (!done.stop_requested()) cancel();
  });
  v1::DeviceToCoordinator hello;
  hello.mutable_hello()->set_device_id(device_id);
  hello.mutable_hello()->set_protocol_version(wire::kProtocolVersion);
  hello.mutable_hello()->set_sdk_version(std::string(version_string()));
  hello.mutable_hello()->set_credential(connection.credential);
  if (!stream->write(hello)) {
    // The stream's ending says why (gRPC's dial error, a TLS failure), for the device's log,
    // and carries any pace the coordinator asked for; a stop asked meanwhile ends serving
    // without error, as it does while dialling.
    const Status ended = stream->finish("coordinator");
    if (connection.stop.stop_requested()) return {};
    return {make_error(ErrorCode::unavailable, "coordinator",
                       "coordinator: cannot reach " + coordinator_address +
                           (ended ? std::string() : " (" + ended.error().message + ")")),
            stream->retry_after()};
  }
  // Writes come from this thread (replies) and the watch ticker (alerts): one at a time.
  std::mutex own_device_mutex, write_mutex;
  std::mutex& device_mutex = connection.device_mutex ? *connection.device_mutex : own_device_mutex;
  auto send = [&](v1::DeviceToCoordinator out) {
    std::lock_guard lock(write_mutex);
    return stream->write(out);
  };
  Status frame_error;  // a Welcome whose frame this device cannot take, or a second Welcome
  bool welcome_seen = false;
  std::optional<WatchTicker> ticker;
  ticker.emplace(device, device_mutex, connection.watch_limits, send);
  // Marks an answer in progress; false once the watchdog has cancelled the stream (the device
  // is then not asked at all, so nothing is charged that could not be sent).
  const auto begin_answer = [&] {
    std::lock_guard lock(watch_mutex);
    if (cancelled) return false;
    answering = true;
    last_activity = std::chrono::steady_clock::now();
    watch_changed.notify_all();
    return true;
  };
  const auto end_answer = [&] {
    std::lock_guard lock(watch_mutex);
    answering = false;
    last_activity = std::chrono::steady_clock::now();
    watch_changed.notify_all();
  };
  v1::CoordinatorToDevice message;
  bool stream_ended = false;  // by the coordinator or the connection, not by this device
  std::chrono::milliseconds retry_after{0};  // the coordinator's Goodbye: come back after this
  for (;;) {
    if (!stream->read(message)) {
      stream_ended = true;
      break;
    }
    if (message.has_start_watch()) {
      if (!begin_answer()) break;
      const bool started = ticker->start(message.start_watch());
      end_answer();
      if (!started) break;
      continue;
    }
    if (!message.has_request()) {
      if (message.has_goodbye()) {  // the coordinator ends the call itself
        // At most a day: a coordinator cannot park a device for good.
        retry_after = std::chrono::milliseconds(
            std::min<std::uint32_t>(message.goodbye().retry_after_ms(), 86400000));
        stream_ended = true;
        break;
      }
      if (message.has_welcome()) {
        // One Welcome per session: a frame change takes a new session, so a coordinator cannot
        // re-frame a connected device again and again (and every device ends the same way).
        if (welcome_seen) {
          frame_error = make_error(ErrorCode::invalid_argument, "welcome",
                                   "welcome: " + coordinator_address +
                                       " sent a second Welcome in one session; the session "
                                       "is ended (a new frame takes a new session)");
          break;
        }
        welcome_seen = true;
        if (auto s = apply_frame(message.welcome(), connection, device, device_mutex); !s) {
          frame_error = s;
          break;
        }
        std::lock_guard lock(watch_mutex);
        welcomed = true;
        watch_changed.notify_all();
      }
      continue;
    }
    // The device sees exactly the bytes a coordinator sent: the same path as the C ABI.
    const std::string request = wire::serialize(message.request());
    if (!begin_answer()) break;
    std::string reply;
    {
      std::lock_guard lock(device_mutex);
      reply =
          device.handle({reinterpret_cast<const std::uint8_t*>(request.data()), request.size()});
    }
    if (connection.reply_delay.count() > 0) std::this_thread::sleep_for(connection.reply_delay);
    v1::DeviceToCoordinator out;
    const bool sent = out.mutable_reply()->ParseFromString(reply) && send(std::move(out));
    end_answer();
    if (!sent) break;
  }
  ticker.reset();  // no alert is written once the stream is closing
  // Leaving on its own (a frame it cannot take, a second Welcome, a failed write), the device
  // does not wait for the coordinator to end the call: a hostile one never would.
  if (!stream_ended) stream->cancel();
  const Status ended = stream->finish("coordinator");
  retry_after = std::max(retry_after, stream->retry_after());
  watchdog.request_stop();
  watchdog.join();
  if (!frame_error) return {frame_error, retry_after};
  if (gave_up)
    return {make_error(ErrorCode::deadline_exceeded, "coordinator",
                       "coordinator: no Welcome from " + coordinator_address + " within 10 s"),
            retry_after};
  if (!ended && ended.error().code == ErrorCode::unauthenticated)
    return {make_error(ErrorCode::unauthenticated, "credential",
                       "credential: the coordinator refused device " + device_id),
            retry_after};
  if (connection.stop.stop_requested()) return {Status{}, retry_after};
  return {ended, retry_after};
}

}  // namespace detail
}  // namespace cgp::link

// cgp-coordinator: the coordinator as a network service, and its enrolment helpers.
//
//   cgp-coordinator serve --listen HOST:PORT --devices FILE --analyst-credential FILE
//                         [--tls-cert PEM --tls-key PEM] [--budget RHO] [--dimension D]
//                         [--deadline-ms MS] [--horizon H] [--queues Q] [--quiet]
//                         [--watch-min-tick-seconds S] [--analyst-listen HOST:PORT]
//                         [--frame local:LON,LAT] [--check-in] [--drain-ms MS]
//                         [--console HOST:PORT [--console-assets DIR] [--console-tiles URL]]
//                         [connection limits: see --help]
//   cgp-coordinator enrol --devices FILE --id ID --credential-out FILE
//   cgp-coordinator enrol --devices FILE --count N [--prefix P] --secrets-out FILE
//   cgp-coordinator revoke --devices FILE --id ID
//   cgp-coordinator credential --out FILE [--force]
//   cgp-coordinator cluster --cluster CONNINFO --analyst-credential FILE
//                           [--control-listen ADDR] [--control-advertise HOST:PORT]
//                           [--analyst-listen ADDR] [--tls-cert PEM --tls-key PEM]
//                           [--min-gateways N] [--horizon H] [--poll-ms MS]
//                           [--haproxy-socket PATH --haproxy-map PATH --address-template T]
//
// serve runs until SIGINT or SIGTERM (with --drain-ms, health says NOT_SERVING that long first,
// everything else served; a second signal stops at once); it logs one line per event to stderr,
// and re-reads the enrolment file on SIGHUP and whenever it changes (checked every 2 s): devices
// no longer in it are revoked at once, devices new in it can connect at once and are asked from
// the next query, and a changed credential replaces the old one at once. enrol refuses an id
// already enrolled and never overwrites a key file; revoke takes a device out of the file (a
// running coordinator follows both within 2 s).
// cluster leads a live tier, or waits as its standby until the leader is gone
// (tools/cluster_coordinator.hpp); it exits 4 when it lost the lead.
// Exit 0 on success; 1 when the service cannot start; 2 on bad arguments or values; 3 on a
// missing, unreadable or invalid file.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "cgp/common/files.hpp"
#include "cgp/common/geometry/frame_projection.hpp"
#include "cgp/common/version.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cli_support.hpp"
#include "cluster_command.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-coordinator: %s\n", message.c_str());
  return code;
}

// A file that could not be read, or held something invalid (a duplicate id included): exit 3.
int fail_with(const cgp::Error& error) {
  return fail(3, error.message);
}

// ISO 8601 UTC with milliseconds, for the event log.
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(millis));
  return text;
}

// The enrolment file as it is now, or empty when it does not exist yet (a first enrol).
cgp::Expected<cgp::transport::Enrolment> current_enrolment(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) return cgp::transport::Enrolment{};
  return cgp::transport::read_enrolment(path);
}

int enrol_devices(const std::string& devices, const std::vector<std::string>& ids,
                  const std::string& secrets_path, bool csv_secrets) {
  for (const auto& each : ids)
    if (auto valid = cgp::protocol::require_id(csv_secrets ? "--prefix" : "--id", each); !valid)
      return fail(2, valid.error().message);
  auto entries = current_enrolment(devices);
  if (!entries) return fail_with(entries.error());
  // A revoked id is enrolled again on its own line: it keeps its user index.
  std::map<std::string, std::size_t, std::less<>> line_of;
  for (std::size_t i = 0; i < entries->size(); ++i) line_of.emplace((*entries)[i].id, i);
  for (const auto& each : ids)
    if (auto line = line_of.find(each);
        line != line_of.end() && !(*entries)[line->second].revoked())
      return fail(2, "already_exists: device id '" + each + "' is already enrolled in " + devices +
                         " (revoke it first to give it a new credential)");
  std::string secrets;
  for (const auto& each : ids) {
    const std::string secret = cgp::transport::new_credential();
    const auto digest = cgp::transport::sha256_of(secret);
    if (auto line = line_of.find(each); line != line_of.end())
      (*entries)[line->second].credential = digest;
    else
      entries->push_back({each, digest});
    secrets += csv_secrets ? each + "," + secret + "\n" : secret + "\n";
  }
  // The key file first, refusing to replace one: a lost key is a device that cannot connect.
  if (auto written = cgp::write_private_file(
          secrets_path, csv_secrets ? "--secrets-out" : "--credential-out", secrets, false);
      !written)
    return fail(written.error().code == cgp::ErrorCode::already_exists ? 2 : 3,
                written.error().message);
  if (auto written = cgp::transport::write_enrolment(devices, *entries); !written) {
    ::unlink(secrets_path.c_str());
    return fail(3, written.error().message);
  }
  return 0;
}

int revoke_device(const std::string& devices, const std::string& id) {
  auto entries = cgp::transport::read_enrolment(devices);
  if (!entries) return fail_with(entries.error());
  auto entry = std::find_if(entries->begin(), entries->end(),
                            [&](const auto& enrolled) { return enrolled.id == id; });
  if (entry == entries->end())
    return fail(2, "--id: device id '" + id + "' is not enrolled in " + devices);
  if (entry->revoked()) return 0;  // already: nothing to write
  // Its line stays ("id,revoked"): no other device moves to a new user index.
  entry->credential.reset();
  if (auto written = cgp::transport::write_enrolment(devices, *entries); !written)
    return fail(3, written.error().message);
  return 0;
}

timespec to_timespec(std::chrono::steady_clock::duration wait) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(wait);
  return {static_cast<time_t>(seconds.count()),
          static_cast<long>(std::chrono::nanoseconds(wait - seconds).count())};
}

struct FileStamp {
  timespec modified{};
  ino_t inode = 0;
  off_t size = 0;
  bool operator==(const FileStamp& o) const {
    return modified.tv_sec == o.modified.tv_sec && modified.tv_nsec == o.modified.tv_nsec &&
           inode == o.inode && size == o.size;
  }
};
FileStamp stamp_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return {};
  return {info.st_mtim, info.st_ino, info.st_size};
}

// Follows the enrolment file as it is now: devices it no longer lists with a credential are
// revoked, devices it lists anew (or again, after a revoke) are enrolled and can connect at once,
// and a device listed with another credential takes it (its old one stops working at once).
// New devices become the next users in the file's order, as a restart would number them; a file
// edited by hand so that its order and ours differ is logged, since user indices would then
// change at the next restart. `running`: the enrolment as last followed, updated here. An empty
// file revokes every device; an unreadable one changes nothing.
void follow_enrolment(const std::string& path, cgp::transport::CoordinatorService& service,
                      cgp::transport::Enrolment& running,
                      const std::function<void(const std::string&)>& log) {
  auto entries = cgp::transport::read_enrolment(path);
  if (!entries) {
    if (log)
      log("event=enrolment-unreadable error=" + cgp::protocol::log_value(entries.error().message));
    return;
  }
  std::map<std::string, cgp::transport::CredentialSha256, std::less<>> listed, before;
  for (const auto& [id, credential] : *entries)
    if (credential) listed.emplace(id, *credential);  // revoked lines are not served
  for (const auto& [id, credential] : running)
    if (credential) before.emplace(id, *credential);
  for (const auto& [id, credential] : before)
    if (listed.count(id) == 0) (void)service.revoke(id);  // logged by the gateway when it is new
  std::size_t added = 0;
  for (std::size_t line = 0; line < entries->size(); ++line) {
    auto& [id, credential] = (*entries)[line];
    if (!credential) continue;
    if (auto was = before.find(id); was != before.end() && was->second == *credential) continue;
    auto enrolled = service.enrol(id, *credential);
    if (!enrolled) {
      if (log)
        log("event=enrolment-refused device=" + cgp::protocol::log_value(id) +
            " error=" + cgp::protocol::log_value(enrolled.error().message));
      credential.reset();  // not served: tried again at the next change
      continue;
    }
    if (enrolled->new_user || enrolled->readmitted) ++added;
    if (enrolled->credential_changed && log)
      log("event=credential-changed device=" + cgp::protocol::log_value(id));
    if (enrolled->new_user && enrolled->user != line && log)
      log("event=warning device=" + cgp::protocol::log_value(id) +
          " user=" + std::to_string(enrolled->user) + " entry=" + std::to_string(line) +
          " message=\"the enrolment file lost or reordered entries: user indices change at the "
          "next restart\"");
  }
  if (added > 0 && log) log("event=enrolment-added devices=" + std::to_string(added));
  running = std::move(*entries);
}

// Serves until SIGINT or SIGTERM, following the enrolment file on SIGHUP and whenever it
// changes (`seen`: its stamp when `running` was read). With a drain, the first signal starts it
// (health NOT_SERVING, everything else served) and the coordinator stops when it ends or at a
// second signal. Returns the signal that began the stop.
int serve_until_stopped(const sigset_t& signals, cgp::transport::CoordinatorService& service,
                        const std::string& devices_file, FileStamp seen,
                        cgp::transport::Enrolment& running,
                        const std::function<void(const std::string&)>& log,
                        const std::function<void(const std::string&)>& say,
                        std::chrono::milliseconds drain) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> drain_ends;
  int stop_signal = 0;
  for (;;) {
    timespec tick{2, 0};
    if (drain_ends) {
      const auto left = *drain_ends - Clock::now();
      if (left <= Clock::duration::zero()) return stop_signal;
      tick = to_timespec(std::min<Clock::duration>(left, std::chrono::seconds(2)));
    }
    siginfo_t info;
    const int received = sigtimedwait(&signals, &info, &tick);
    if (received == SIGINT || received == SIGTERM) {
      if (drain.count() == 0) return received;
      if (drain_ends) {
        say("event=drain-cut-short signal=" + std::to_string(received));
        return stop_signal;
      }
      stop_signal = received;
      say("event=draining signal=" + std::to_string(received) +
          " drain_ms=" + std::to_string(drain.count()));
      drain_ends = service.start_draining();
      continue;
    }
    // Devices are still served while draining: the enrolment is still followed.
    const FileStamp now = stamp_of(devices_file);
    if (received == SIGHUP || !(now == seen)) {
      seen = now;
      follow_enrolment(devices_file, service, running, log);
    }
  }
}

// Everything the command line can say; each command reads what it declared.
struct Arguments {
  // serve
  std::string listen = "127.0.0.1:7070", devices_file, analyst_file, tls_cert, tls_key;
  double budget = 1.0, watch_min_tick = 1;
  std::size_t dimension = 2, horizon = 20;
  long deadline_ms = 5000;
  // No drain by default: without a load balancer nobody reads health, and a stop that waits
  // would only delay every restart (and every test and script that stops a coordinator). Behind
  // one, the right drain is its unhealthy threshold (probe interval × failures), which only the
  // operator knows: deploy/coordinator.toml sets one.
  long drain_ms = 0;
  bool quiet = false;
  std::size_t queues = 8, frame_loops = 2, reconnect_rate = 1000;
  std::string metrics_listen, state_file, frame, analyst_listen, frames_listen, console_listen,
      console_assets, console_tiles;
  cgp::transport::ConnectionLimits analyst_limits =
      cgp::transport::CoordinatorOptions::default_analyst_limits();
  bool no_state = false, check_in = false, init_state = false;
  std::size_t keep_results = 10000;
  double keep_days = 30;
  cgp::transport::ConnectionLimits limits;
  long handshake_ms = limits.handshake_timeout.count(), idle_ms = limits.idle_timeout.count(),
       hello_ms = 10000, keepalive_ms = limits.keepalive_time.count(),
       health_watch_ms = limits.health_watches.lifetime.count(),
       reflection_ms = limits.reflection_streams.lifetime.count();
  // enrol
  std::string enrol_file, id, credential_out, prefix = "device-", secrets_out;
  std::size_t count = 0;
  // revoke
  std::string revoke_devices, revoke_id;
  // credential
  std::string credential_file;
  bool force = false;
  // cluster
  cgp::tools::ClusterCommandArguments cluster;
};

void serve_flags(CLI::App& sub, Arguments& a) {
  auto* serve = &sub;
  serve->add_option("--listen", a.listen, "HOST:PORT for devices and analysts")
      ->capture_default_str();
  serve->add_option("--devices", a.devices_file, "enrolment file (id,sha256 lines)")->required();
  serve->add_option("--analyst-credential", a.analyst_file, "file holding the analyst credential")
      ->required();
  serve->add_option("--tls-cert", a.tls_cert, "PEM certificate chain (TLS)");
  serve->add_option("--tls-key", a.tls_key, "PEM private key (TLS)");
  serve->add_option("--frame", a.frame,
                    "how the locations' metres come from lon/lat (local:LON,LAT: azimuthal "
                    "equidistant around LON,LAT): announced to devices, stamped on requests");
  serve->add_option("--budget", a.budget, "each device's total rho (its CGP filter; rho per m^2)")
      ->capture_default_str();
  serve->add_option("--dimension", a.dimension, "dimension of the queried component")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  serve->add_option("--deadline-ms", a.deadline_ms, "per-round deadline, milliseconds")
      ->check(CLI::Range(1L, 3600L * 1000))
      ->capture_default_str();
  serve
      ->add_option("--drain-ms", a.drain_ms,
                   "at SIGTERM/SIGINT, health says NOT_SERVING for this long while everything "
                   "else is served, then the coordinator stops (a second signal stops at once)")
      ->check(
          CLI::Range(0L, static_cast<long>(cgp::transport::CoordinatorOptions::kMaxDrain.count())))
      ->capture_default_str();
  serve->add_flag("--check-in", a.check_in,
                  "devices connect now and then: queue each round's requests for the devices "
                  "not connected, deliver them when they check in; --deadline-ms is the window");
  serve->add_option("--horizon", a.horizon, "queries the adaptive allocation plans for")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  serve
      ->add_option("--watch-min-tick-seconds", a.watch_min_tick,
                   "the shortest watch tick the devices accept, seconds (cgp-device "
                   "--min-tick-seconds): shorter ticks are refused before they are sent")
      ->check(cgp::tools::finite_in(0.001, 1e7))
      ->capture_default_str();
  serve->add_flag("--quiet", a.quiet, "no event log on stderr");
  serve->add_option("--state", a.state_file,
                    "SQLite file for finished results and the budget mirror "
                    "(default: the --devices file with .state appended)");
  serve->add_flag("--no-state", a.no_state, "keep results and the mirror in memory only");
  serve->add_flag("--init-state", a.init_state,
                  "start anew on a state file that exists but is empty (otherwise refused: it "
                  "lost its budget mirror and used query ids)");
  serve->add_option("--keep-results", a.keep_results, "finished results kept, newest first")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000000}))
      ->capture_default_str();
  serve->add_option("--keep-results-days", a.keep_days, "finished results kept at most, days")
      ->check(cgp::tools::finite_in(0.001, 36500.0))
      ->capture_default_str();
  serve->add_option("--console", a.console_listen,
                    "HOST:PORT for the console: HTTP API and page (docs/console.md; none by "
                    "default; HTTPS with --tls-cert/--tls-key)");
  serve->add_option("--console-assets", a.console_assets,
                    "the console page's folder (default: share/cgpkit/console beside the "
                    "program's bin folder, if there)");
  serve->add_option(
      "--console-tiles", a.console_tiles,
      "tile server for the console's map, e.g. https://tile.example.org/{z}/{x}/{y}.png "
      "(needs --frame local:LON,LAT; default: the offline map only)");
  serve->add_option("--metrics-listen", a.metrics_listen,
                    "HOST:PORT for Prometheus' GET /metrics (none by default)");
  serve->add_option("--analyst-listen", a.analyst_listen,
                    "HOST:PORT of the analyst's own port (Analyst API, health, reflection), with "
                    "its own connection caps that devices never take (default: the --listen port)");
  serve->add_option("--device-frames-listen", a.frames_listen,
                    "HOST:PORT of the lean device transport (TLS 1.3 frames, docs/protocol.md "
                    "§2b; needs --tls-cert/--tls-key), beside the gRPC --listen port");
  serve
      ->add_option("--frame-loops", a.frame_loops,
                   "epoll threads driving the device frames connections")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  serve
      ->add_option("--reconnect-rate", a.reconnect_rate,
                   "devices per second a stop spreads reconnects over (each device's Goodbye "
                   "says when to come back; 0: no delay)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1000000}))
      ->capture_default_str();
  serve
      ->add_option("--queues", a.queues,
                   "gRPC completion queues for device streams (a thread each)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  const auto count_range = CLI::Range(std::size_t{1}, std::size_t{1} << 30);
  const auto ms_range = CLI::Range(1L, 365L * 24 * 3600 * 1000);
  serve
      ->add_option("--max-connections", a.limits.max_connections,
                   "open TCP connections in all (lowered to the descriptor budget)")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--max-connections-per-address", a.limits.max_connections_per_address,
                   "open TCP connections per peer IP address")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--analyst-max-connections", a.analyst_limits.max_connections,
                   "open TCP connections in all on the --analyst-listen port")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--analyst-max-connections-per-address",
                   a.analyst_limits.max_connections_per_address,
                   "open TCP connections per peer IP address on the --analyst-listen port")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--max-pending-streams", a.limits.max_pending_streams,
                   "device streams not yet past Hello, in all")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--max-pending-streams-per-address", a.limits.max_pending_streams_per_address,
                   "device streams not yet past Hello, per peer IP address")
      ->check(count_range)
      ->capture_default_str();
  // Streams that need no credential (health Watch, reflection): caps and lifetimes, per port.
  serve
      ->add_option("--max-health-watches", a.limits.health_watches.total,
                   "grpc.health.v1 Watch streams open in all (each port)")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--max-health-watches-per-address", a.limits.health_watches.per_address,
                   "grpc.health.v1 Watch streams per peer IP address")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--health-watch-lifetime-ms", a.health_watch_ms,
                   "a Watch stream is ended after this, ms (the prober watches again)")
      ->check(ms_range)
      ->capture_default_str();
  serve
      ->add_option("--max-reflection-streams", a.limits.reflection_streams.total,
                   "server reflection streams open in all (each port)")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--max-reflection-streams-per-address", a.limits.reflection_streams.per_address,
                   "server reflection streams per peer IP address")
      ->check(count_range)
      ->capture_default_str();
  serve
      ->add_option("--reflection-lifetime-ms", a.reflection_ms,
                   "a reflection stream is ended after this, ms")
      ->check(ms_range)
      ->capture_default_str();
  serve->add_option("--handshake-timeout-ms", a.handshake_ms, "TCP accept to HTTP/2 settings, ms")
      ->check(ms_range)
      ->capture_default_str();
  serve->add_option("--hello-timeout-ms", a.hello_ms, "stream start to the device's Hello, ms")
      ->check(ms_range)
      ->capture_default_str();
  serve->add_option("--idle-timeout-ms", a.idle_ms, "a connection with no call open is closed, ms")
      ->check(ms_range)
      ->capture_default_str();
  serve->add_option("--keepalive-ms", a.keepalive_ms, "HTTP/2 keepalive ping interval, ms")
      ->check(ms_range)
      ->capture_default_str();
}

void enrol_flags(CLI::App& enrol, Arguments& a) {
  enrol.add_option("--devices", a.enrol_file, "enrolment file to add to")->required();
  enrol.add_option("--id", a.id, "one device's id");
  enrol.add_option("--credential-out", a.credential_out,
                   "where the device's credential goes (must not exist)");
  enrol.add_option("--count", a.count, "enrol N devices PREFIX0 .. PREFIX(N-1)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}));
  enrol.add_option("--prefix", a.prefix, "id prefix for --count")->capture_default_str();
  enrol.add_option("--secrets-out", a.secrets_out,
                   "CSV id,credential for --count (swarms; must not exist)");
}

int run_enrol(const Arguments& a) {
  if (!a.id.empty() && a.count == 0 && !a.credential_out.empty())
    return enrol_devices(a.enrol_file, {a.id}, a.credential_out, false);
  if (a.id.empty() && a.count > 0 && !a.secrets_out.empty()) {
    std::vector<std::string> ids;
    ids.reserve(a.count);
    for (std::size_t i = 0; i < a.count; ++i) ids.push_back(a.prefix + std::to_string(i));
    return enrol_devices(a.enrol_file, ids, a.secrets_out, true);
  }
  return fail(2, "enrol needs either --id and --credential-out, or --count and --secrets-out");
}

void revoke_flags(CLI::App& revoke, Arguments& a) {
  revoke.add_option("--devices", a.revoke_devices, "enrolment file")->required();
  revoke.add_option("--id", a.revoke_id, "the device's id")->required();
}

int run_revoke(const Arguments& a) {
  return revoke_device(a.revoke_devices, a.revoke_id);
}

void credential_flags(CLI::App& credential, Arguments& a) {
  credential.add_option("--out", a.credential_file, "file to write (must not exist)")->required();
  credential.add_flag("--force", a.force, "replace an existing file");
}

int run_credential(const Arguments& a) {
  if (auto written = cgp::write_private_file(a.credential_file, "--out",
                                             cgp::transport::new_credential() + "\n", a.force);
      !written)
    return fail(written.error().code == cgp::ErrorCode::already_exists ? 2 : 3,
                written.error().message);
  return 0;
}

// The console page installed with the program: share/cgpkit/console beside its bin folder (the
// build tree has the same layout). Empty when not there: the console serves its API only.
std::string installed_console_assets() {
  std::error_code failed;
  const auto program = std::filesystem::read_symlink("/proc/self/exe", failed);
  if (failed) return {};
  const auto assets = program.parent_path().parent_path() / "share" / "cgpkit" / "console";
  return std::filesystem::is_directory(assets / ".", failed) ? assets.string() : std::string();
}

int run_serve(const Arguments& a) {
  cgp::transport::ConnectionLimits limits = a.limits;
  // The stamp before the read: a change made while the service starts is seen at the first tick.
  FileStamp seen = stamp_of(a.devices_file);
  auto enrolled = cgp::transport::read_enrolment(a.devices_file);
  if (!enrolled) return fail_with(enrolled.error());
  if (std::none_of(enrolled->begin(), enrolled->end(), [](auto& d) { return !d.revoked(); }))
    return fail(3, "--devices: " + a.devices_file + " lists no device that is not revoked");
  auto analyst_secret = cgp::read_secret(a.analyst_file, "--analyst-credential");
  if (!analyst_secret) return fail(3, analyst_secret.error().message);
  cgp::transport::CoordinatorOptions options;
  options.gateway.address = a.listen;
  options.gateway.completion_queues = a.queues;
  options.gateway.frames_address = a.frames_listen;
  options.gateway.frame_loops = a.frame_loops;
  options.gateway.reconnect_rate = a.reconnect_rate;
  if (!a.frame.empty()) {
    auto frame = cgp::geometry::LocationFrame::parse(a.frame);
    if (!frame) return fail(2, "--frame: " + frame.error().message);
    // Devices take local frames only (frame_projection.md): announcing another would make every
    // device given lon/lat leave, so it is refused here, by name, before anything starts.
    if (auto usable = cgp::geometry::FrameProjection::create(*frame); !usable)
      return fail(2, "--frame: " + usable.error().message);
    options.gateway.frame = *frame;
  }
  if (a.tls_cert.empty() != a.tls_key.empty())
    return fail(2, "--tls-cert and --tls-key go together");
  if (!a.frames_listen.empty() && a.tls_cert.empty())
    return fail(2,
                "--device-frames-listen: the lean device transport is TLS only; give "
                "--tls-cert and --tls-key");
  if (!a.tls_cert.empty()) {
    auto chain = cgp::read_file(a.tls_cert, "--tls-cert");
    if (!chain) return fail(3, chain.error().message);
    auto key = cgp::read_file(a.tls_key, "--tls-key");
    if (!key) return fail(3, key.error().message);
    options.gateway.tls_certificate_chain = std::move(*chain);
    options.gateway.tls_private_key = std::move(*key);
  }
  for (const auto& [device, credential] : *enrolled) {
    options.device_ids.push_back(device);
    if (credential)
      options.gateway.device_credential_digests[device] = *credential;
    else
      options.revoked_device_ids.push_back(device);
  }
  options.analyst_credential_sha256 = cgp::transport::sha256_of(*analyst_secret);
  options.device_budget = a.budget;
  options.dimension = a.dimension;
  options.horizon = a.horizon;
  options.watch_min_tick_seconds = a.watch_min_tick;
  options.round_deadline = std::chrono::milliseconds(a.deadline_ms);
  options.drain = std::chrono::milliseconds(a.drain_ms);
  options.check_in = a.check_in;
  options.metrics_address = a.metrics_listen;
  options.console_address = a.console_listen;
  options.console_assets_dir = a.console_assets;
  options.console_tiles_url = a.console_tiles;
  if (a.console_listen.empty() && !a.console_tiles.empty())
    return fail(2, "--console-tiles: needs --console");
  if (!a.console_listen.empty() && a.console_assets.empty())
    options.console_assets_dir = installed_console_assets();
  if (a.console_listen.empty() && !a.console_assets.empty())
    return fail(2, "--console-assets: needs --console");
  options.analyst_address = a.analyst_listen;
  options.analyst_limits.max_connections = a.analyst_limits.max_connections;
  options.analyst_limits.max_connections_per_address = a.analyst_limits.max_connections_per_address;
  if (!a.no_state)
    options.state_path = a.state_file.empty() ? a.devices_file + ".state" : a.state_file;
  options.init_state = a.init_state;
  options.retention.max_results = a.keep_results;
  options.retention.max_age = std::chrono::seconds(static_cast<long>(a.keep_days * 86400));
  limits.handshake_timeout = std::chrono::milliseconds(a.handshake_ms);
  limits.health_watches.lifetime = std::chrono::milliseconds(a.health_watch_ms);
  limits.reflection_streams.lifetime = std::chrono::milliseconds(a.reflection_ms);
  // A stream per connection may not exceed the per-address cap.
  for (auto* caps : {&limits.health_watches, &limits.reflection_streams})
    caps->per_connection = std::min(caps->per_connection, caps->per_address);
  limits.idle_timeout = std::chrono::milliseconds(a.idle_ms);
  limits.keepalive_time = std::chrono::milliseconds(a.keepalive_ms);
  options.gateway.limits = limits;
  // The analyst's port: its own counts, the same timeouts.
  options.analyst_limits.handshake_timeout = limits.handshake_timeout;
  options.analyst_limits.idle_timeout = limits.idle_timeout;
  options.analyst_limits.keepalive_time = limits.keepalive_time;
  options.analyst_limits.health_watches = limits.health_watches;
  options.analyst_limits.reflection_streams = limits.reflection_streams;
  options.gateway.hello_timeout = std::chrono::milliseconds(a.hello_ms);
  static std::mutex log_mutex;
  if (!a.quiet) {
    options.gateway.log = [](const std::string& line) {
      std::lock_guard lock(log_mutex);
      std::fprintf(stderr, "ts=%s %s\n", utc_now().c_str(), line.c_str());
    };
  }
  // gRPC's own lines in the same structured form (or dropped with --quiet).
  cgp::protocol::route_grpc_logs(a.quiet ? [](const std::string&) {} : options.gateway.log);

  // Signals are taken by sigwait below, not by a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto service = cgp::transport::CoordinatorService::start(options);
  if (!service) {
    const auto& error = service.error();
    // A port or state file in use, or a server that would not start, is not a bad argument
    // (exit 1: systemd may restart); a state file that is not one is a file problem (3).
    if (error.code == cgp::ErrorCode::unavailable || error.code == cgp::ErrorCode::internal_error)
      return fail(1, error.message);
    return fail(error.parameter == "state" || error.parameter == "tls" ? 3 : 2, error.message);
  }
  // Every line on stderr while serving is a log line with ts (also with --quiet: these two).
  const auto say = [](const std::string& line) {
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "ts=%s %s\n", utc_now().c_str(), line.c_str());
  };
  say("event=listening address=" + cgp::protocol::log_value(a.listen) + " port=" +
      std::to_string((*service)->port()) + " devices=" + std::to_string(options.device_ids.size()) +
      " tls=" + (a.tls_cert.empty() ? "off" : "on") +
      " max_connections=" + std::to_string((*service)->gateway().max_connections()) +
      " analyst_port=" + std::to_string((*service)->analyst_port()) +
      " frames_port=" + std::to_string((*service)->gateway().frames_port()) +
      " metrics_port=" + std::to_string((*service)->metrics_port()) +
      " version=" + std::string(cgp::version_string()));
  if (a.tls_cert.empty())
    say("event=warning message=\"plaintext: credentials cross the network in clear; use "
        "--tls-cert/--tls-key beyond loopback\"");
  const int received = serve_until_stopped(signals, **service, a.devices_file, seen, *enrolled,
                                           options.gateway.log, say, options.drain);
  say("event=stopping signal=" + std::to_string(received));
  service->reset();
  return 0;
}

// The commands: each declares its flags and runs.
struct Command {
  const char* name;
  const char* description;
  void (*flags)(CLI::App&, Arguments&);
  int (*run)(const Arguments&);
};

const Command kCommands[] = {
    {"serve", "run the coordinator until SIGINT/SIGTERM", serve_flags, run_serve},
    {"enrol", "enrol devices: new credentials, digests appended", enrol_flags, run_enrol},
    {"revoke", "take a device out of the enrolment file (a running coordinator follows)",
     revoke_flags, run_revoke},
    {"credential", "write a fresh analyst credential", credential_flags, run_credential},
    {"cluster",
     "lead a live tier (or wait as its standby): the Analyst API over its gateways, "
     "docs/cluster.md",
     [](CLI::App& command, Arguments& a) { cgp::tools::cluster_command_flags(command, a.cluster); },
     [](const Arguments& a) { return cgp::tools::run_cluster_command(a.cluster); }},
};

int run(int argc, char** argv) {
  CLI::App app{"cgp-coordinator: run a cgpkit coordinator service, enrol and revoke devices"};
  // --config: every flag from a TOML file, serve's under [serve] ("listen = \"0.0.0.0:7070\"",
  // names without the dashes); flags on the command line win. Unknown keys are errors.
  cgp::tools::add_common_flags(app, /*config_file=*/true);
  app.require_subcommand(1);
  Arguments a;
  const auto commands = cgp::tools::add_commands(app, std::span<const Command>(kCommands), a);
  if (auto done = cgp::tools::parse_command_line(app, argc, argv, "cgp-coordinator")) return *done;
  if (const Command* command = cgp::tools::parsed_command(commands)) return command->run(a);
  return fail(2, "no command given");
}

}  // namespace

int main(int argc, char** argv) {
  cgp::protocol::turn_off_lock_order_graph();
  return cgp::tools::guarded_main("cgp-coordinator", [&] { return run(argc, argv); });
}

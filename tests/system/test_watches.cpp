// Watches over the network: the coordinator sends a WatchSpec to real cgp-device
// processes over TLS (and to a swarm), each arms it within its own budget, ticks it on the
// public schedule, and sends one alert at most; the analyst reads who alerted at which tick.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "coordinator_state.hpp"
#include "network_fixtures.hpp"
#include "support/seed.hpp"
#include "watch_board.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

void terminate(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    std::this_thread::sleep_for(100ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// A fresh directory for a test's files, removed however the test ends.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// A swarm of devices with budget 1 that accept the tests' fast schedules (ticks of 50 ms+).
swarm::SwarmOptions watch_swarm(std::uint64_t seed, const std::string& address = "") {
  swarm::SwarmOptions options;
  options.coordinator_address = address;
  options.config = *DeviceConfig::cgp(1.0);
  options.seed = seed;
  options.watch_limits.min_tick_seconds = 0.05;
  return options;
}

// The device processes of a test: terminated however the test ends (a failed REQUIRE included),
// so that none outlives it holding the runner's output open.
struct DeviceProcesses {
  std::vector<pid_t> pids;
  ~DeviceProcesses() {
    for (pid_t pid : pids) terminate(pid);
  }
};

// A geofence of 300 m around (1000, 2000) at ε = 1 per metre: noise scales 2 m and 4 m, so a
// device 10 m or more inside alerts at its first tick except with probability below e^-70,
// and one 5 km away never alerts (below 100·e^-170 over 100 ticks).
WatchSpec geofence(const std::string& id, std::uint64_t horizon, double tick_seconds) {
  WatchSpecParams p;
  p.watch_id = id;
  p.component_id = "location";
  p.statistic = StatisticKind::distance_to_point;
  p.point = {1000, 2000};
  p.threshold = 300;
  p.clamp_lo = 0;
  p.clamp_hi = 1000;
  p.horizon = horizon;
  p.epsilon = 1.0;
  p.tick_seconds = tick_seconds;
  auto spec = WatchSpec::create(p);
  REQUIRE(spec.has_value());
  return *spec;
}

template <class Done>
analyst::RemoteWatch poll_watch(analyst::AnalystClient& analyst, const std::string& id, Done&& done,
                                std::chrono::seconds limit = 30s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto report = analyst.watch(id);
    REQUIRE(report.has_value());
    if (done(*report) || std::chrono::steady_clock::now() > until) return *report;
    std::this_thread::sleep_for(50ms);
  }
}

}  // namespace

TEST_CASE("watches: real cgp-device processes over TLS arm a watch and alert once",
          "[transport][watch][device-program]") {
  test::ThrowawayCertificate tls;
  const ScratchDir scratch("cgp-watch-net");
  const auto& dir = scratch.path;
  const std::vector<std::string> ids = {"inside", "edge-in", "outside"};
  const std::vector<std::string> locations = {"1000,2000", "1000,2290", "6000,2000"};
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = ids;
  options.gateway.tls_certificate_chain = tls.certificate;
  options.gateway.tls_private_key = tls.key;
  options.analyst_credential_sha256 = transport::sha256_of("analyst-secret");
  for (const auto& id : ids) options.gateway.device_credentials[id] = "secret-" + id;
  auto service = transport::CoordinatorService::start(options);
  REQUIRE(service.has_value());
  const std::string address = "127.0.0.1:" + std::to_string((*service)->port());
  const auto root = dir / "root.pem";
  std::ofstream(root) << tls.certificate;

  auto start_device = [&](std::size_t i) {
    const auto credential = dir / (ids[i] + ".secret");
    std::ofstream(credential) << "secret-" << ids[i] << "\n";
    return test::spawn_program({CGP_DEVICE_PATH, "--coordinator", address, "--id", ids[i],
                                "--credential", credential.string(), "--tls-root", root.string(),
                                "--ledger", (dir / (ids[i] + ".db")).string(), "--budget", "1",
                                "--location", locations[i], "--reconnect", "--min-tick-seconds",
                                "0.05"});
  };
  DeviceProcesses processes;
  auto& devices = processes.pids;
  devices = {start_device(0), start_device(1)};
  REQUIRE((*service)->gateway().wait_for_devices(2, 30s));

  analyst::AnalystConnection connection;
  connection.coordinator_address = address;
  connection.credential = "analyst-secret";
  connection.tls_root_certificate = tls.certificate;
  auto analyst = analyst::AnalystClient::connect(connection);
  REQUIRE(analyst.has_value());

  // Bad specs and reused ids are named errors, and nothing reaches a device.
  WatchSpec spec = geofence("fence", 40, 0.25);
  {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls.certificate;
    auto stub = v1::Analyst::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
    grpc::ClientContext context;
    context.AddMetadata("cgp-analyst-credential", "analyst-secret");
    v1::StartWatchRequest request;
    *request.mutable_spec() = wire::watch_to_wire(spec);
    request.mutable_spec()->set_epsilon(-1);
    v1::WatchReport out;
    const grpc::Status status = stub->StartWatch(&context, request, &out);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message().find("epsilon") != std::string::npos);
    grpc::ClientContext no_credential;
    CHECK(stub->StartWatch(&no_credential, request, &out).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
  }
  auto started = analyst->start_watch(spec);
  REQUIRE(started.has_value());
  CHECK(started->devices.size() == 3);
  REQUIRE(started->spec.has_value());
  CHECK(started->spec->params().start_unix_seconds > 0);  // the coordinator's clock
  auto again = analyst->start_watch(spec);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code == ErrorCode::already_exists);
  CHECK(again.error().parameter == "watch_id");
  auto unknown = analyst->watch("nope");
  REQUIRE_FALSE(unknown.has_value());

  // Both devices inside alert, each once, at an early tick; "outside" is not connected yet.
  auto report =
      poll_watch(*analyst, "fence", [](const analyst::RemoteWatch& w) { return w.alerts == 2; });
  CHECK(report.alerts == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO(ids[i]);
    CHECK(report.devices[i].state == analyst::RemoteDeviceWatch::State::armed);
    CHECK(report.devices[i].alert_tick >= 1);
    CHECK(report.devices[i].alert_tick <= 8);  // the first tick due, allowing a slow start
  }
  CHECK(report.devices[2].state == analyst::RemoteDeviceWatch::State::pending);

  // A device that connects later gets the watch when it connects, arms it and stays silent.
  devices.push_back(start_device(2));
  report = poll_watch(*analyst, "fence", [](const analyst::RemoteWatch& w) {
    return w.devices[2].state != analyst::RemoteDeviceWatch::State::pending;
  });
  CHECK(report.devices[2].state == analyst::RemoteDeviceWatch::State::armed);

  // Restarting the inside device and the armed outside one: both resume from their ledgers
  // (the outside one gets the watch again, a free replay) and nothing new is sent.
  const std::uint64_t first_tick = report.devices[0].alert_tick;
  for (std::size_t i : {0, 2}) {
    terminate(devices[i]);
    devices[i] = start_device(i);
  }
  REQUIRE((*service)->gateway().wait_for_devices(3, 30s));
  std::this_thread::sleep_for(1s);
  report = *analyst->watch("fence");
  CHECK(report.devices[0].alert_tick == first_tick);
  CHECK(report.devices[2].alert_tick == 0);
  CHECK(report.devices[2].state == analyst::RemoteDeviceWatch::State::armed);
  CHECK(report.alerts == 2);

  service->reset();
}

TEST_CASE("watches: a swarm arms and alerts on the public schedule, one alert per device",
          "[transport][watch]") {
  CGP_SEEDED(7117);
  const std::size_t n = 20;
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = test::device_ids(n);
  options.device_budget = 1.0;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  auto swarm_options = watch_swarm(seed, address);
  std::vector<swarm::SwarmMember> members;
  // Even users stand 50 m from the site (inside), odd ones 5 km away.
  for (std::size_t i = 0; i < n; ++i)
    members.push_back({options.device_ids[i], "", {1000.0 + (i % 2 == 0 ? 50.0 : 5000.0), 2000.0}});
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, std::move(members));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  auto analyst =
      analyst::AnalystClient::connect({address, "", "", 60s, std::nullopt, std::nullopt});
  REQUIRE(analyst.has_value());
  // Over every user but the last two.
  std::vector<coordinator::UserId> users;
  for (std::size_t i = 0; i + 2 < n; ++i) users.push_back(static_cast<coordinator::UserId>(i));
  const WatchSpec spec = geofence("swarm-fence", 20, 0.1);
  auto started = analyst->start_watch(spec, users);
  REQUIRE(started.has_value());
  CHECK(started->devices.size() == n - 2);
  auto report = poll_watch(*analyst, "swarm-fence", [&](const analyst::RemoteWatch& w) {
    return w.alerts == (n - 2) / 2 && w.armed == n - 2;
  });
  CHECK(report.armed == n - 2);
  CHECK(report.alerts == (n - 2) / 2);
  for (const auto& device : report.devices) {
    INFO(device.device_id);
    const bool inside = device.user % 2 == 0;
    CHECK((device.alert_tick != 0) == inside);
  }
  // Each armed device paid the watch once: ρ = (ε(1 + 2^-10))²/2 at ε = 1, added to its spent
  // total rounding up (PrivacyFilter::spent_after).
  const double charge = privacy::next_up(laplace_watch_charge(1.0));
  for (std::size_t i = 0; i < n; ++i) {
    INFO("device " << i);
    CHECK(swarm->spent(i) == (i + 2 < n ? charge : 0.0));
  }
  // Dropped devices reconnect: one that alerted (0) and one armed without an alert (1, which
  // gets the watch again: a replay, charged nothing more).
  for (std::size_t i : {0, 1}) {
    swarm->drop(i);
    REQUIRE(swarm->reconnect(i));
  }
  REQUIRE(swarm->wait_connected(n, 30s));
  std::this_thread::sleep_for(500ms);
  CHECK(swarm->spent(0) == charge);
  CHECK(swarm->spent(1) == charge);
  CHECK(analyst->watch("swarm-fence")->devices[1].state ==
        analyst::RemoteDeviceWatch::State::armed);
  CHECK(analyst->watch("swarm-fence")->alerts == (n - 2) / 2);
  swarm.reset();
  service.reset();
}

namespace {

struct ProgramOutput {
  int exit_code = -1;
  std::string text;  // stdout and stderr
};

ProgramOutput run_program(const std::string& command) {
  ProgramOutput out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    out.text.append(buffer, n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST_CASE("watches: cgp-analyst starts a watch and reads its alerts, bad flags exit 2 by name",
          "[transport][watch][tools]") {
  CGP_SEEDED(7121);
  const std::size_t n = 4;
  const ScratchDir scratch("cgp-watch-cli");
  const auto& dir = scratch.path;
  std::ofstream(dir / "analyst") << "analyst-secret\n";
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = test::device_ids(n);
  options.analyst_credential_sha256 = transport::sha256_of("analyst-secret");
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  auto swarm_options = watch_swarm(seed, address);
  std::vector<swarm::SwarmMember> members;
  for (std::size_t i = 0; i < n; ++i)  // users 0 and 1 inside the fence, 2 and 3 far away
    members.push_back({options.device_ids[i], "", {1000.0 + (i < 2 ? 20.0 : 8000.0), 2000.0}});
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, std::move(members));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  const std::string analyst = std::string(CGP_ANALYST_PATH) + " --coordinator " + address +
                              " --credential " + (dir / "analyst").string();
  const std::string fence = " --point 1000,2000 --threshold 300 --horizon 50 --tick-seconds 0.1";
  // Bad flags: exit 2, the parameter named, nothing sent.
  for (const auto& [flags, name] : std::vector<std::pair<std::string, std::string>>{
           {" --id f" + fence + " --epsilon -1", "epsilon"},
           {" --id f" + fence + " --epsilon 1 --clamp 500,1000", "threshold"},
           {" --id f --threshold 300 --horizon 5 --tick-seconds 1 --epsilon 1", "--point"},
           {" --id f" + fence + " --epsilon 1 --users 0,9", "users"}}) {
    INFO(flags);
    const auto bad = run_program(analyst + " watch-start" + flags);
    CHECK(bad.exit_code == (name == "users" ? 1 : 2));
    CHECK(bad.text.find(name) != std::string::npos);
  }
  CHECK_FALSE(run_program(analyst + " watch --id f").exit_code == 0);  // nothing was made

  const auto started =
      run_program(analyst + " watch-start --id cli-fence" + fence + " --epsilon 1 --users 0,1,2");
  REQUIRE(started.exit_code == 0);
  CHECK(started.text.find("\"watch_id\": \"cli-fence\"") != std::string::npos);
  // Poll `cgp-analyst watch` until both inside devices alerted and the far one's acknowledgement
  // is in (each device reports on its own stream: an alert can overtake another device's ack).
  ProgramOutput shown;
  for (int i = 0; i < 100; ++i) {
    shown = run_program(analyst + " watch --id cli-fence");
    REQUIRE(shown.exit_code == 0);
    if (shown.text.find("\"alerts\": 2") != std::string::npos &&
        shown.text.find("\"armed\": 3") != std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(shown.text.find("\"alerts\": 2") != std::string::npos);
  CHECK(shown.text.find("\"armed\": 3") != std::string::npos);
  CHECK(shown.text.find("device-3") == std::string::npos);  // not in this watch
  swarm.reset();
  service.reset();
}

TEST_CASE("watches: a restarted coordinator keeps its watches, alerts and pending devices",
          "[transport][watch][state]") {
  CGP_SEEDED(7131);
  const std::size_t n = 4;
  const ScratchDir scratch("cgp-watch-state");
  const auto& dir = scratch.path;
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = test::device_ids(n);
  options.state_path = (dir / "state.db").string();
  auto swarm_options = watch_swarm(seed);
  // device-0 and device-1 inside, device-2 far away; device-3 not connected at first.
  std::vector<swarm::SwarmMember> members;
  for (std::size_t i = 0; i < 3; ++i)
    members.push_back({options.device_ids[i], "", {1000.0 + (i < 2 ? 20.0 : 8000.0), 2000.0}});

  std::uint64_t alert_tick = 0;
  {
    auto service = *transport::CoordinatorService::start(options);
    swarm_options.coordinator_address = "127.0.0.1:" + std::to_string(service->port());
    auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
    REQUIRE(service->gateway().wait_for_devices(3, 30s));
    auto analyst = *analyst::AnalystClient::connect(
        {swarm_options.coordinator_address, "", "", 30s, std::nullopt, std::nullopt});
    REQUIRE(analyst.start_watch(geofence("kept", 40, 0.1)).has_value());
    const auto report = poll_watch(analyst, "kept", [](const analyst::RemoteWatch& w) {
      return w.alerts == 2 && w.armed == 3;
    });
    REQUIRE(report.alerts == 2);
    alert_tick = report.devices[0].alert_tick;
    swarm.reset();
  }
  // The restarted coordinator answers from its state file, still refuses the used id, and
  // sends the watch to the device that was never connected.
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  auto kept = analyst.watch("kept");
  REQUIRE(kept.has_value());
  CHECK(kept->alerts == 2);
  CHECK(kept->devices[0].alert_tick == alert_tick);
  CHECK(kept->devices[3].state == analyst::RemoteDeviceWatch::State::pending);
  CHECK(analyst.start_watch(geofence("kept", 40, 0.1)).error().code == ErrorCode::already_exists);
  swarm_options.coordinator_address = address;
  auto late =
      *swarm::DeviceSwarm::start(swarm_options, {{options.device_ids[3], "", {1000.0, 2000.0}}});
  const auto after = poll_watch(analyst, "kept", [](const analyst::RemoteWatch& w) {
    return w.devices[3].state != analyst::RemoteDeviceWatch::State::pending;
  });
  CHECK(after.devices[3].state == analyst::RemoteDeviceWatch::State::armed);
  late.reset();
  service.reset();
}

TEST_CASE("watches: what devices would refuse is refused by the coordinator, by name, uncharged",
          "[transport][watch]") {
  CGP_SEEDED(7141);
  const std::size_t n = 4;
  const ScratchDir scratch("cgp-watch-refuse");
  const auto& dir = scratch.path;
  transport::CoordinatorOptions options;
  // Below what the devices accept (0.05 s): a tick in between reaches them, and they refuse it.
  options.watch_min_tick_seconds = 0.01;
  options.device_ids = test::device_ids(n);
  options.state_path = (dir / "state.db").string();
  options.device_budget = 1.0;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  REQUIRE(service->revoke("device-3").has_value());
  auto swarm_options = watch_swarm(seed, address);
  std::vector<swarm::SwarmMember> members;
  for (std::size_t i = 0; i < 3; ++i) members.push_back({options.device_ids[i], "", {0.0, 0.0}});
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
  REQUIRE(service->gateway().wait_for_devices(3, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});

  auto with = [](const std::string& id, auto&& change) {
    WatchSpecParams p = geofence(id, 40, 0.1).params();
    change(p);
    auto spec = WatchSpec::create(p);
    REQUIRE(spec.has_value());
    return *spec;
  };
  struct Case {
    WatchSpec spec;
    std::vector<coordinator::UserId> users;
    std::string parameter;
  };
  const std::vector<Case> cases = {
      {with("no-schedule", [](WatchSpecParams& p) { p.tick_seconds = 0; }), {}, "tick_seconds"},
      {with("ended",
            [](WatchSpecParams& p) {
              p.start_unix_seconds = 1e9;  // 2001
            }),
       {},
       "start_unix_seconds"},
      {with("tiny",
            [](WatchSpecParams& p) {
              p.epsilon = 1e-6;
              p.clamp_hi = 1000;
            }),
       {},
       "epsilon"},
      {geofence("revoked", 40, 0.1), {0, 3}, "users"},
      // On 3f97682 these two went out, every device refused them, and the mirror
      // was debited for every device all the same (200 devices: 0.195 → 0).
      {geofence("too-fast", 40, 0.005), {}, "tick_seconds"},
      {with("costs-everything", [](WatchSpecParams& p) { p.epsilon = 2; }), {}, "epsilon"},
  };
  for (const Case& c : cases) {
    INFO(c.spec.watch_id());
    auto refused = analyst.start_watch(c.spec, c.users);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == c.parameter);
    CHECK_FALSE(analyst.watch(c.spec.watch_id()).has_value());  // nothing made, nothing sent
  }
  // A gaussian_expost watch: devices cannot run it yet.
  WatchSpecParams gaussian = geofence("gauss", 40, 0.1).params();
  gaussian.noise = WatchNoise::gaussian_expost;
  gaussian.epsilon = 0;
  gaussian.sigma = 50;
  auto expost = analyst.start_watch(*WatchSpec::create(gaussian));
  REQUIRE_FALSE(expost.has_value());
  CHECK(expost.error().parameter == "noise");
  for (std::size_t i = 0; i < 3; ++i) CHECK(swarm->spent(i) == 0);

  // Ticks shorter than a device's minimum but not the coordinator's: the device refuses by name
  // before it is charged, and the mirror's hold goes back.
  auto fast = analyst.start_watch(geofence("fast", 400, 0.02), {0});
  REQUIRE(fast.has_value());
  auto answered = poll_watch(analyst, "fast", [](const analyst::RemoteWatch& w) {
    return w.devices[0].state != analyst::RemoteDeviceWatch::State::pending;
  });
  CHECK(answered.devices[0].state == analyst::RemoteDeviceWatch::State::rejected);
  CHECK(answered.devices[0].error.message.find("tick_seconds") != std::string::npos);
  CHECK(swarm->spent(0) == 0);

  // A user named twice is one device, charged once by it and once in the mirror.
  REQUIRE(analyst.start_watch(geofence("twice", 40, 0.1), {1, 1, 1, 1}).has_value());
  auto twice =
      poll_watch(analyst, "twice", [](const analyst::RemoteWatch& w) { return w.armed == 1; });
  CHECK(twice.devices.size() == 1);
  swarm.reset();
  service.reset();
  auto state = transport::detail::CoordinatorState::open(options.state_path);
  REQUIRE(state.has_value());
  const auto mirror = *(*state)->mirror();
  const double capacity = DeviceConfig::cgp(1.0)->rho_capacity();
  // "fast" was rejected by device-0: its hold went back; "twice" armed on device-1, once.
  CHECK(mirror.at("device-0") == Approx(capacity).epsilon(1e-12));
  CHECK(mirror.at("device-0") <= capacity);
  // device-2 was only in watches refused up front: never debited.
  CHECK((mirror.count("device-2") == 0 || mirror.at("device-2") == capacity));
  CHECK(mirror.at("device-1") == Approx(capacity - laplace_watch_charge(1.0)).epsilon(1e-12));
  CHECK(mirror.at("device-1") > capacity - 2 * laplace_watch_charge(1.0));
}

TEST_CASE("watches: the coordinator's board takes only alerts a device may send",
          "[transport][watch]") {
  transport::detail::WatchBoard board;
  std::vector<std::tuple<std::string, std::string, std::string>> changes;
  board.set_observer([&](const std::string& w, const std::string& d, const std::string& bytes) {
    changes.emplace_back(w, d, bytes);
  });
  auto spec = wire::watch_to_wire(geofence("board", 10, 60));
  const double start = 1.7e9;
  spec.set_start_unix_seconds(start);
  REQUIRE(board.add(spec, {{0, "a"}, {1, "b"}, {2, "c"}, {1, "b"}}).ok());
  CHECK_FALSE(board.add(spec, {{0, "a"}}).ok());
  REQUIRE(changes.size() == 1);
  CHECK(std::get<1>(changes[0]).empty());  // a new watch: the whole report
  v1::WatchReport first;
  REQUIRE(first.ParseFromString(std::get<2>(changes[0])));
  CHECK(first.devices_size() == 3);  // "b" once

  auto alert = [&](const std::string& device, std::uint64_t tick, double now) {
    v1::WatchAlert a;
    a.set_watch_id("board");
    a.set_tick(tick);
    return board.alerted(device, a, now);
  };
  const double later = start + 5 * 60 + 1;   // ticks 1..6 are due
  CHECK_FALSE(alert("stranger", 1, later));  // not in the watch
  CHECK_FALSE(alert("a", 0, later));
  CHECK_FALSE(alert("a", 11, later));  // beyond the horizon
  CHECK_FALSE(alert("a", 9, later));   // not yet due
  CHECK(alert("a", 6, later));
  CHECK_FALSE(alert("a", 2, later));  // once
  // A device that refused cannot alert; an armed one is not downgraded by a later error.
  v1::WatchStarted refused;
  refused.set_watch_id("board");
  refused.set_status(v1::WATCH_REFUSED_BUDGET);
  board.started("b", refused);
  CHECK_FALSE(alert("b", 3, later));
  v1::WatchStarted armed;
  armed.set_watch_id("board");
  armed.set_status(v1::WATCH_ARMED);
  board.started("c", armed);
  v1::WatchStarted failed;
  failed.set_watch_id("board");
  failed.set_status(v1::WATCH_REJECTED_INVALID);
  failed.set_error_message(std::string(399, 'x') + "\xc3\xa9 and more");  // é across byte 400
  board.started("c", failed);
  auto report = *board.report("board");
  CHECK(report.devices(2).state() == v1::DEVICE_WATCH_ARMED);
  CHECK(report.alerts() == 1);
  CHECK(report.refused() == 1);
  // A rejection's message is cut at a character boundary: the report still serializes
  // and parses (proto3 strings must be UTF-8).
  transport::detail::WatchBoard other;
  REQUIRE(other.add(spec, {{0, "d"}}).ok());
  failed.set_error_message(std::string(399, 'x') + "\xc3\xa9");
  other.started("d", failed);
  v1::WatchReport parsed;
  CHECK(parsed.ParseFromString(other.report("board")->SerializeAsString()));
  CHECK(parsed.devices(0).error_message().size() == 399);
  // Pending devices get the watch while it runs; armed ones without an alert a day longer.
  CHECK(board.for_device("a", later).empty());  // alerted
  CHECK(board.for_device("c", start + 10 * 60 + 3600).size() == 1);
  CHECK(board.for_device("c", start + 10 * 60 + 2 * 86400).empty());
  CHECK(other.for_device("d", later).empty());  // rejected
  transport::detail::WatchBoard fresh;
  REQUIRE(fresh.add(spec, {{0, "e"}}).ok());
  CHECK(fresh.for_device("e", later).size() == 1);
  CHECK(fresh.for_device("e", start + 10 * 60 + 1).empty());  // ended: arming would be waste
  // Every device change reached the observer as that device's entry.
  CHECK(std::get<1>(changes.back()) == "c");
}

TEST_CASE("watches: a cgp-device killed mid-watch resumes after its last tick and alerts later",
          "[transport][watch][device-program]") {
  const ScratchDir scratch("cgp-watch-resume");
  const auto& dir = scratch.path;
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = {"walker"};
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  auto start_device = [&](const std::string& location) {
    return test::spawn_program({CGP_DEVICE_PATH, "--coordinator", address, "--id", "walker",
                                "--ledger", (dir / "walker.db").string(), "--budget", "1",
                                "--location", location, "--reconnect", "--min-tick-seconds",
                                "0.05"});
  };
  DeviceProcesses processes;
  processes.pids = {start_device("6000,2000")};  // far away: silent ticks
  REQUIRE(service->gateway().wait_for_devices(1, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  REQUIRE(analyst.start_watch(geofence("resume", 400, 0.05)).has_value());
  poll_watch(analyst, "resume", [](const analyst::RemoteWatch& w) { return w.armed == 1; });
  std::this_thread::sleep_for(1s);  // about 20 silent ticks, each in the ledger
  kill(processes.pids[0], SIGKILL);
  waitpid(processes.pids[0], nullptr, 0);
  const auto killed_at = std::chrono::system_clock::now();
  // Back at the site: the device resumes from its ledger (armed, not charged again) and alerts
  // at a tick after the ones it evaluated before the kill.
  processes.pids[0] = start_device("1000,2000");
  auto report =
      poll_watch(analyst, "resume", [](const analyst::RemoteWatch& w) { return w.alerts == 1; });
  REQUIRE(report.alerts == 1);
  const double start = report.spec->params().start_unix_seconds;
  const double killed = std::chrono::duration<double>(killed_at.time_since_epoch()).count();
  CHECK(report.devices[0].alert_tick > static_cast<std::uint64_t>((killed - start) / 0.05));
  service.reset();
  terminate(processes.pids[0]);
  processes.pids.clear();
  // One arming, one charge, across the kill.
  auto ledger = client::Device::open_secure(*DeviceConfig::cgp(1.0), (dir / "walker.db").c_str());
  REQUIRE(ledger.has_value());
  CHECK(ledger->spent() == privacy::next_up(laplace_watch_charge(1.0)));
  auto state = ledger->watch_state("resume");
  REQUIRE(state.has_value());
  CHECK(state->alert_tick == report.devices[0].alert_tick);
}

TEST_CASE("watches: a device runs at most --max-watches at once, the next refused uncharged",
          "[transport][watch]") {
  CGP_SEEDED(7151);
  transport::CoordinatorOptions options;
  options.watch_min_tick_seconds = 0.05;  // as the tests' devices accept
  options.device_ids = {"busy"};
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  auto swarm_options = watch_swarm(seed, address);
  swarm_options.watch_limits.max_watches = 2;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, {{"busy", "", {6000.0, 2000.0}}});
  REQUIRE(service->gateway().wait_for_devices(1, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  // ε = 0.5: each arming costs 0.125 of the device's budget of 1, so only the cap refuses.
  auto watch = [](const char* id) {
    WatchSpecParams p = geofence(id, 400, 0.05).params();
    p.epsilon = 0.5;
    return *WatchSpec::create(p);
  };
  for (const char* id : {"first", "second", "third"}) {
    REQUIRE(analyst.start_watch(watch(id)).has_value());
    poll_watch(analyst, id, [](const analyst::RemoteWatch& w) { return w.pending == 0; });
  }
  CHECK(analyst.watch("first")->armed == 1);
  CHECK(analyst.watch("second")->armed == 1);
  const auto third = *analyst.watch("third");
  CHECK(third.rejected == 1);
  CHECK(third.devices[0].error.message.find("watch_id") != std::string::npos);
  // Two armings charged, the refused one nothing.
  CHECK(swarm->spent(0) ==
        privacy::next_up(privacy::next_up(laplace_watch_charge(0.5)) + laplace_watch_charge(0.5)));
}

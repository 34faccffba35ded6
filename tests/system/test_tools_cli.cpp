// The four network programs against hostile arguments and files, and
// enrolment that refuses duplicates and overwrites, with revoke on a running coordinator
// (item 8). On 51cfbc1 most rows of the table aborted (exit 134, an uncaught exception), one
// read out of bounds, and others succeeded silently with a wrong value.
#include <fcntl.h>
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

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/files.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/credentials.hpp"
#include "support/run_program.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal
  std::string err;
};

// Runs a program to its end; its stderr is returned (stdout is not looked at).
Outcome run_tool(std::vector<std::string> arguments, const fs::path& scratch) {
  auto run = test::run_program(std::move(arguments), scratch);
  return {run.exit_code, std::move(run.err)};
}

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("cgp-cli-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "a-directory");
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace

TEST_CASE("tools: hostile arguments and files get a named error and exit 2 or 3",
          "[transport][tools]") {
  Scratch s;
  const std::string coordinator = CGP_COORDINATOR_PATH, analyst = CGP_ANALYST_PATH,
                    device = CGP_DEVICE_PATH, swarm = CGP_SWARM_PATH;
  REQUIRE(run_tool({coordinator, "credential", "--out", s / "analyst"}, s.dir).exit_code == 0);
  REQUIRE(run_tool({coordinator, "enrol", "--devices", s / "devices.csv", "--id", "d0",
                    "--credential-out", s / "d0.key"},
                   s.dir)
              .exit_code == 0);
  { std::ofstream(s / "small.csv") << "x,y\n1,2\n3,4\n5,6\n"; }
  {
    // A 20 KB file of nested sections took 3.1 GB of CLI11's parser.
    std::ofstream deep(s / "deep.toml");
    deep << "[serve]\n";
    std::string section = "a";
    for (int level = 0; level < 200; ++level, section += ".a") deep << "[" << section << "]\n";
    std::ofstream(s / "big.toml") << std::string(70000, '#') << "\n";
    // Strings were taken for numbers.
    std::ofstream(s / "typed.toml") << "[serve]\nmax-connections = \"50\"\n";
  }
  const std::string dir = s / "a-directory";
  // serve with a valid enrolment; `credential` and `listen` replaceable, `more` appended.
  auto serve = [&](const std::string& credential, const std::string& listen,
                   std::initializer_list<std::string> more) {
    std::vector<std::string> arguments = {coordinator,
                                          "serve",
                                          "--listen",
                                          listen,
                                          "--devices",
                                          s / "devices.csv",
                                          "--analyst-credential",
                                          credential,
                                          "--quiet"};
    arguments.insert(arguments.end(), more);
    return arguments;
  };
  const std::string analyst_file = s / "analyst", any = "127.0.0.1:0";
  struct Row {
    std::vector<std::string> arguments;
    int exit_code;
    std::string says;  // a substring of stderr that names what is wrong
  };
  const std::vector<Row> table = {
      // Files that are not files, or never end.
      {{coordinator, "serve", "--devices", dir, "--analyst-credential", s / "analyst"},
       3,
       "not a regular file"},
      {{coordinator, "serve", "--devices", "/dev/zero", "--analyst-credential", s / "analyst"},
       3,
       "not a regular file"},
      {serve(dir, any, {}), 3, "--analyst-credential"},
      {serve("/dev/zero", any, {}), 3, "--analyst-credential"},
      {serve(analyst_file, any, {"--tls-cert", dir, "--tls-key", analyst_file}), 3, "--tls-cert"},
      {serve(analyst_file, any, {"--tls-cert", analyst_file, "--tls-key", "/dev/zero"}), 3,
       "--tls-key"},
      {{analyst, "--coordinator", "127.0.0.1:1", "--credential", dir, "status"}, 3, "--credential"},
      {{analyst, "--coordinator", "127.0.0.1:1", "--tls-root", "/dev/zero", "status"},
       3,
       "--tls-root"},
      {{device, "--coordinator", "127.0.0.1:1", "--id", "d0", "--ledger", s / "ledger.db",
        "--budget", "1", "--components", "/dev/zero"},
       3,
       "--components"},
      {{device, "--coordinator", "127.0.0.1:1", "--id", "d0", "--ledger", s / "ledger.db",
        "--budget", "1", "--credential", dir},
       3,
       "--credential"},
      // An id that is not UTF-8 reached the wire (a protobuf error per message
      // and an empty error from the coordinator).
      {{device, "--coordinator", "127.0.0.1:1", "--id", "d\xff", "--ledger", s / "ledger.db",
        "--budget", "1", "--location", "1,2"},
       2,
       "--id may hold only"},
      {{swarm, "--coordinator", "127.0.0.1:1", "--count", "1", "--tls-root", dir}, 3, "--tls-root"},
      {{swarm, "--coordinator", "127.0.0.1:1", "--count", "1", "--secrets", "/dev/zero"},
       3,
       "--secrets"},
      // Numbers out of range: refused, never wrapped or truncated.
      {serve(analyst_file, any, {"--horizon", "18446744073709551615"}), 2, "--horizon"},
      {serve(analyst_file, "127.0.0.1:99999", {}), 2, "0..65535"},
      {serve(analyst_file, any, {"--budget", "-1"}), 2, "budget"},
      {serve(analyst_file, any, {"--queues", "0"}), 2, "--queues"},
      {serve(analyst_file, any, {"--analyst-listen", "127.0.0.1:99999"}), 2, "analyst_listen"},
      {{coordinator, "--config", s / "deep.toml", "serve"}, 3, "nested more than 4 deep"},
      {{coordinator, "--config", s / "big.toml", "serve"}, 3, "more than the 65536 allowed"},
      {{coordinator, "--config=/dev/zero", "serve"}, 3, "--config: /dev/zero is not a regular"},
      {{coordinator, "--config", s / "typed.toml", "serve"},
       2,
       "line 2: max-connections takes a number, not a string"},
      // Garbage TLS material started a coordinator that said tls=on.
      {serve(analyst_file, any, {"--tls-cert", analyst_file, "--tls-key", analyst_file}), 3,
       "tls: the certificate chain holds no PEM certificate"},
      {serve(analyst_file, any, {"--analyst-max-connections", "0"}), 2,
       "--analyst-max-connections"},
      // Location frames: named, and before anything starts.
      {serve(analyst_file, any, {"--frame", "utm:1,2"}), 2, "projection"},
      {serve(analyst_file, any, {"--frame", "local:-73.97,95"}), 2, "frame.origin_lat"},
      {serve(analyst_file, any, {"--frame", "mercator:-74"}), 2, "frame.projection"},
      {{device, "--coordinator", "127.0.0.1:1", "--id", "d0", "--ledger", s / "ledger.db",
        "--budget", "1", "--lonlat", "200,1"},
       2,
       "--lonlat"},
      {{device, "--coordinator", "127.0.0.1:1", "--id", "d0", "--ledger", s / "ledger.db",
        "--budget", "1", "--lonlat", "1,2", "--location", "1,2"},
       2,
       "--lonlat"},
      {{coordinator, "enrol", "--devices", s / "devices.csv", "--count", "99999999999",
        "--secrets-out", s / "many.csv"},
       2,
       "--count"},
      {{swarm, "--coordinator", "127.0.0.1:1", "--count", "-1"}, 2, "--count"},
      {{swarm, "--coordinator", "127.0.0.1:1", "--count", "1e9"}, 2, "--count"},
      {{swarm, "--coordinator", "127.0.0.1:1", "--count", "2", "--offset", "2", "--data",
        s / "small.csv"},
       2,
       "--offset"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--rho", "0.1", "--c",
        "4294967300"},
       2,
       "--c"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--rho", "-1"},
       2,
       "--rho"},
      // NaN passed CLI11's range checks (a NaN rho ran adaptive and charged
      // every device); a target of 0 was ignored; beta 0 was taken. All named, nothing sent.
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--rho", "nan"},
       2,
       "--rho"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--rho", "inf"},
       2,
       "--rho"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--target", "nan"},
       2,
       "--target"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--target", "0"},
       2,
       "--target"},
      {{analyst, "--coordinator", "127.0.0.1:1", "range", "--box", "0,0,1,1", "--rho", "0.1",
        "--beta", "0"},
       2,
       "--beta"},
      {{analyst, "--coordinator", "127.0.0.1:1", "--min-coverage", "nan", "status"},
       2,
       "--min-coverage"},
      // Writes that fail are failures, and keys are never overwritten.
      // An unchecked value() made this "internal error", exit 1.
      {{CGP_SIM_PATH, "multi-range", "--m", "2000000", "--budget", "1", "--w", "1000"}, 2, "--m"},
      {{coordinator, "credential", "--out", "/dev/full", "--force"}, 3, "--out"},
      {{coordinator, "credential", "--out", s / "analyst"}, 2, "exists"},
      {{coordinator, "credential", "--out", s / "a-directory/missing/x"}, 3, "--out"},
  };
  for (const auto& row : table) {
    std::string shown;
    for (std::size_t i = 1; i < row.arguments.size(); ++i) shown += row.arguments[i] + " ";
    INFO(fs::path(row.arguments[0]).filename().string() << " " << shown);
    const auto outcome = run_tool(row.arguments, s.dir);
    INFO("stderr: " << outcome.err);
    CHECK(outcome.exit_code == row.exit_code);
    CHECK(outcome.err.find(row.says) != std::string::npos);
  }
  // The device checked its files before creating a ledger.
  CHECK_FALSE(fs::exists(s / "ledger.db"));
}

TEST_CASE("tools: enrol refuses a second enrolment of an id and never overwrites a key",
          "[transport][tools]") {
  Scratch s;
  const std::string coordinator = CGP_COORDINATOR_PATH;
  const std::string devices = s / "devices.csv";
  REQUIRE(run_tool({coordinator, "enrol", "--devices", devices, "--id", "d0", "--credential-out",
                    s / "d0.key"},
                   s.dir)
              .exit_code == 0);
  const std::string key = test::read_whole(s / "d0.key"), enrolment = test::read_whole(devices);
  CHECK(fs::status(s / "d0.key").permissions() == (fs::perms::owner_read | fs::perms::owner_write));

  // d0 again (on 51cfbc1: a second line, and the next serve refused to start).
  auto again = run_tool({coordinator, "enrol", "--devices", devices, "--id", "d0",
                         "--credential-out", s / "d0-again.key"},
                        s.dir);
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("already enrolled") != std::string::npos);
  CHECK_FALSE(fs::exists(s / "d0-again.key"));
  // A new id whose key file exists (on 51cfbc1: silently overwritten, d0 locked out).
  auto overwrite = run_tool(
      {coordinator, "enrol", "--devices", devices, "--id", "d1", "--credential-out", s / "d0.key"},
      s.dir);
  CHECK(overwrite.exit_code == 2);
  CHECK(overwrite.err.find("exists") != std::string::npos);
  CHECK(test::read_whole(s / "d0.key") == key);
  CHECK(test::read_whole(devices) == enrolment);
  // A batch that overlaps the enrolled ids is refused whole.
  CHECK(run_tool({coordinator, "enrol", "--devices", devices, "--count", "3", "--prefix", "d",
                  "--secrets-out", s / "batch.csv"},
                 s.dir)
            .exit_code == 2);
  CHECK(test::read_whole(devices) == enrolment);
  // A file with a duplicate, written by hand, is refused by name with its line.
  { std::ofstream(devices, std::ios::app) << enrolment.substr(enrolment.find("d0,")); }
  auto read = transport::read_enrolment(devices);
  REQUIRE_FALSE(read.has_value());
  CHECK(read.error().code == ErrorCode::already_exists);
  CHECK(read.error().message.find(":3:") != std::string::npos);
}

TEST_CASE("tools: revoke takes a device out of a running coordinator without a restart",
          "[transport][tools]") {
  Scratch s;
  const std::string coordinator = CGP_COORDINATOR_PATH;
  const std::string devices = s / "devices.csv";
  REQUIRE(run_tool({coordinator, "credential", "--out", s / "analyst"}, s.dir).exit_code == 0);
  REQUIRE(run_tool({coordinator, "enrol", "--devices", devices, "--count", "3", "--secrets-out",
                    s / "secrets.csv"},
                   s.dir)
              .exit_code == 0);
  std::string secret;
  std::getline(std::ifstream(s / "analyst"), secret);
  std::vector<swarm::SwarmMember> members;
  {
    std::ifstream in(s / "secrets.csv");
    std::string line;
    for (double x = 0; std::getline(in, line); x += 10)
      members.push_back({line.substr(0, line.find(',')), line.substr(line.find(',') + 1), {x, x}});
  }
  REQUIRE(members.size() == 3);

  // In-process first: the library call.
  {
    transport::CoordinatorOptions options;
    auto enrolled = *transport::read_enrolment(devices);
    for (const auto& [id, credential] : enrolled) {
      options.device_ids.push_back(id);
      options.gateway.device_credential_digests[id] = credential.value();
    }
    auto service = *transport::CoordinatorService::start(options);
    const std::string address = "127.0.0.1:" + std::to_string(service->port());
    swarm::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(1.0);
    auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
    REQUIRE(service->gateway().wait_for_devices(3, 30s));
    REQUIRE(service->revoke("device-1").has_value());
    CHECK_FALSE(*service->revoke("device-1"));  // once is enough
    auto unknown = service->revoke("nobody");
    REQUIRE_FALSE(unknown.has_value());
    CHECK(unknown.error().parameter == "device_id");
    // The swarm redials device-1 with its (valid) credential: refused every time.
    std::this_thread::sleep_for(1500ms);
    CHECK(service->gateway().connected() == 2);
    auto analyst =
        *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
    double lo[2] = {-5, -5}, hi[2] = {100, 100};
    coordinator::QueryOptions query;
    query.query_id = "";
    auto counted =
        analyst.range_count(*geometry::Box::create(lo, hi),
                            analyst::RemoteCharges::fixed(coordinator::Charge{0.5}), query);
    REQUIRE(counted.has_value());
    CHECK(counted->coverage.users == 2);  // device-1 is no longer part of queries
    CHECK(counted->coverage.answered == 2);
    swarm.reset();
  }

  // The program: `revoke` edits the file; the running coordinator follows.
  int port = 0;
  {
    auto probe = transport::DeviceGateway::start("127.0.0.1:0");
    REQUIRE(probe.has_value());
    port = (*probe)->port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> serve = {
      coordinator,   "serve",  "--listen", address, "--devices", devices, "--analyst-credential",
      s / "analyst", "--quiet"};
  std::vector<char*> argv;
  for (auto& a : serve) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t server = 0;
  REQUIRE(posix_spawn(&server, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
  auto connected = [&]() -> long {
    auto analyst =
        analyst::AnalystClient::connect({address, secret, "", 2s, std::nullopt, std::nullopt});
    if (!analyst) return -1;
    auto status = analyst->status();
    return status ? static_cast<long>(status->connected) : -1;
  };
  auto eventually = [](auto&& done, std::chrono::seconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
    return done();
  };
  CHECK(eventually([&] { return connected() == 3; }, 30s));
  auto revoked = run_tool({coordinator, "revoke", "--devices", devices, "--id", "device-2"}, s.dir);
  CHECK(revoked.exit_code == 0);
  // Its line stays, marked: no other device moves to its user index.
  CHECK(test::read_whole(devices).find("device-2,revoked\n") != std::string::npos);
  CHECK(eventually([&] { return connected() == 2; }, 20s));
  std::this_thread::sleep_for(1s);
  CHECK(connected() == 2);  // and it stays out
  // Revoked and enrolled again within one poll: the file lists the id with a new credential;
  // the old one (which the swarm still holds) must stop working at once.
  REQUIRE(run_tool({coordinator, "revoke", "--devices", devices, "--id", "device-1"}, s.dir)
              .exit_code == 0);
  REQUIRE(run_tool({coordinator, "enrol", "--devices", devices, "--id", "device-1",
                    "--credential-out", s / "device-1-new.key"},
                   s.dir)
              .exit_code == 0);
  CHECK(eventually([&] { return connected() == 1; }, 20s));
  auto unknown = run_tool({coordinator, "revoke", "--devices", devices, "--id", "device-9"}, s.dir);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("not enrolled") != std::string::npos);
  swarm.reset();
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  CHECK(WIFEXITED(status));
}

TEST_CASE("tools: revoke and a restart leave every user index naming the same device",
          "[transport][tools]") {
  // Revoke took the device's line out of the file, so after a restart user 5
  // was device-6, and a stored result's user indices named other devices. Now the line stays
  // ("device-2,revoked") and every index keeps its device across the restart.
  Scratch s;
  const std::string coordinator = CGP_COORDINATOR_PATH;
  const std::string devices = s / "devices.csv";
  REQUIRE(run_tool({coordinator, "credential", "--out", s / "analyst"}, s.dir).exit_code == 0);
  REQUIRE(run_tool({coordinator, "enrol", "--devices", devices, "--count", "6", "--secrets-out",
                    s / "secrets.csv"},
                   s.dir)
              .exit_code == 0);
  std::string secret;
  std::getline(std::ifstream(s / "analyst"), secret);
  std::vector<swarm::SwarmMember> members;  // device-0..4 connect; device-5 never does
  {
    std::ifstream in(s / "secrets.csv");
    std::string line;
    for (double x = 0; std::getline(in, line) && members.size() < 5; x += 10)
      members.push_back({line.substr(0, line.find(',')), line.substr(line.find(',') + 1), {x, x}});
  }
  int port = 0;
  {
    auto probe = transport::DeviceGateway::start("127.0.0.1:0");
    REQUIRE(probe.has_value());
    port = (*probe)->port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto serve = [&] {
    std::vector<std::string> arguments = {
        coordinator,   "serve",  "--listen", address, "--devices", devices, "--analyst-credential",
        s / "analyst", "--quiet"};
    std::vector<char*> argv;
    for (auto& a : arguments) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t server = 0;
    REQUIRE(posix_spawn(&server, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    return server;
  };
  auto stop = [](pid_t server) {
    kill(server, SIGTERM);
    int status = 0;
    waitpid(server, &status, 0);
    CHECK(WIFEXITED(status));
  };
  auto analyst_when_connected = [&](std::size_t devices_connected) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < until) {
      // Any share of missing users accepted: device-5 never answers, and that is what is recorded.
      auto analyst = analyst::AnalystClient::connect({address, secret, "", 5s, 0.0, 1.0});
      if (analyst) {
        auto status = analyst->status();
        if (status && status->connected >= devices_connected) return std::move(*analyst);
      }
      std::this_thread::sleep_for(100ms);
    }
    FAIL("the coordinator did not come up with " << devices_connected << " devices");
    throw std::logic_error("unreachable");
  };
  double lo[2] = {-5, -5}, hi[2] = {100, 100};
  const auto box = *geometry::Box::create(lo, hi);
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);

  pid_t server = serve();
  {
    auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
    auto analyst = analyst_when_connected(5);
    coordinator::QueryOptions query;
    query.query_id = "before";
    auto counted =
        analyst.range_count(box, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), query);
    REQUIRE(counted.has_value());
    REQUIRE(counted->report.unanswered == std::vector<coordinator::UserId>{5});
    swarm.reset();
  }
  stop(server);
  REQUIRE(run_tool({coordinator, "revoke", "--devices", devices, "--id", "device-2"}, s.dir)
              .exit_code == 0);
  // Revoking again changes nothing and is not an error.
  const std::string revoked_file = test::read_whole(devices);
  CHECK(run_tool({coordinator, "revoke", "--devices", devices, "--id", "device-2"}, s.dir)
            .exit_code == 0);
  CHECK(test::read_whole(devices) == revoked_file);
  auto enrolled = transport::read_enrolment(devices);
  REQUIRE(enrolled.has_value());
  REQUIRE(enrolled->size() == 6);
  for (std::size_t u = 0; u < 6; ++u) CHECK((*enrolled)[u].id == "device-" + std::to_string(u));
  CHECK((*enrolled)[2].revoked());

  server = serve();
  {
    std::vector<swarm::SwarmMember> live;
    for (const auto& m : members)
      if (m.id != "device-2") live.push_back(m);
    auto swarm = *swarm::DeviceSwarm::start(swarm_options, live);
    auto analyst = analyst_when_connected(4);
    auto status = analyst.status();
    REQUIRE(status.has_value());
    CHECK(status->enrolled == 5);
    // The stored result still names user 5, and user 5 is still device-5.
    auto stored = analyst.result("before");
    REQUIRE(stored.has_value());
    CHECK(stored->report.unanswered == std::vector<coordinator::UserId>{5});
    // User 2 is the revoked device-2 (with a shifted index it would be device-3, which answers).
    coordinator::QueryOptions query;
    auto only_user_2 = analyst.range_count(
        box, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}, {2}), query);
    REQUIRE_FALSE(only_user_2.has_value());
    CHECK(only_user_2.error().message.find("revoked") != std::string::npos);
    // User 4 is device-4, which answers.
    auto only_user_4 = analyst.range_count(
        box, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}, {4}), query);
    REQUIRE(only_user_4.has_value());
    CHECK(only_user_4->coverage.answered == 1);
    swarm.reset();
  }
  stop(server);
  // Enrolled again, device-2 gets its old line (and so its user index) back.
  REQUIRE(run_tool({coordinator, "enrol", "--devices", devices, "--id", "device-2",
                    "--credential-out", s / "device-2-new.key"},
                   s.dir)
              .exit_code == 0);
  enrolled = transport::read_enrolment(devices);
  REQUIRE(enrolled.has_value());
  REQUIRE(enrolled->size() == 6);
  CHECK((*enrolled)[2].id == "device-2");
  CHECK_FALSE((*enrolled)[2].revoked());
}

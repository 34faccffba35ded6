// Issue 33: what the coordinator tells its analyst and its operator. On 3f97682 a NaN ρ sent by
// hand ran an adaptive query and charged every device, ρ = 1e-300 travelled to every device
// before each rejected it, and a restart set every counter but `queries` back to 0 while
// `enrolled` still counted revoked devices.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "../coordinator/fleet_fixtures.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/transport/analyst_client.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/device_swarm.hpp"
#include "cgp/v1/service.grpc.pb.h"
#include "network_fixtures.hpp"
#include "state_reader.hpp"
#include "support/seed.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// A coordinator with a state file and n devices connected from an async swarm.
struct Live {
  transport::CoordinatorOptions options;
  std::unique_ptr<transport::CoordinatorService> service;
  std::unique_ptr<transport::DeviceSwarm> swarm;
  std::string address;
  Live(const std::string& state_path, std::size_t n, std::uint64_t seed) {
    options.device_ids = test::device_ids(n);
    options.state_path = state_path;
    service = *transport::CoordinatorService::start(options);
    address = "127.0.0.1:" + std::to_string(service->port());
    transport::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(1.0);
    swarm_options.seed = seed;
    swarm = *transport::DeviceSwarm::start(
        swarm_options, test::swarm_members(test::uniform_square(n, 1000, seed), n));
    REQUIRE(service->gateway().wait_for_devices(n, 30s));
  }
  ~Live() {
    swarm.reset();
    service.reset();
  }
};

// A call sent by hand, as a client other than ours could: its status.
using HandCall = std::function<grpc::Status(v1::Analyst::Stub&, grpc::ClientContext&)>;
grpc::Status send_by_hand(const std::string& address, const HandCall& call) {
  auto stub =
      v1::Analyst::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 30s);
  return call(*stub, context);
}

v1::QueryOptions fixed(double rho) {
  v1::QueryOptions o;
  o.set_rho(rho);
  return o;
}

}  // namespace

TEST_CASE(
    "service: NaN, zero and tiny numbers sent by hand are refused by name, nothing asked "
    "or charged",
    "[transport][trust]") {
  CGP_SEEDED(3301);
  Scratch scratch("cgp-trust-numbers");
  const std::string state_path = (scratch.dir / "state.db").string();
  const std::size_t n = 12;
  Live live(state_path, n, seed);
  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const v1::Region box = wire::region_to_wire(*geometry::Box::create(lo, hi));

  auto range = [&](v1::QueryOptions options, std::optional<v1::AccuracyTarget> accuracy = {}) {
    return [=](v1::Analyst::Stub& stub, grpc::ClientContext& context) {
      v1::RangeCountQuery q;
      *q.mutable_options() = options;
      *q.mutable_range() = box;
      if (accuracy) *q.mutable_accuracy() = *accuracy;
      v1::QueryResult result;
      return stub.RangeCount(&context, q, &result);
    };
  };
  auto target = [](double relative, double absolute, double growth = 0, double first = 0) {
    v1::AccuracyTarget t;
    t.set_relative(relative);
    t.set_absolute(absolute);
    t.set_growth(growth);
    t.set_first(first);
    return t;
  };
  v1::QueryOptions adaptive_nan;
  adaptive_nan.set_adaptive(true);
  adaptive_nan.set_rho(kNaN);
  v1::QueryOptions beta_nan = fixed(0.1), beta_one = fixed(0.1), coverage_nan = fixed(0.1);
  beta_nan.set_beta(kNaN);
  beta_one.set_beta(1);
  coverage_nan.set_min_coverage(kNaN);
  v1::QueryOptions pm1 = fixed(0.1);
  pm1.set_method("PM1");

  struct Case {
    const char* what;
    HandCall call;
    const char* parameter;
  };
  const std::vector<Case> cases = {
      // The wire's 0 / NaN no longer mean "adaptive": adaptive is its own field.
      {"rho nan", range(fixed(kNaN)), "rho"},
      {"rho 0 without adaptive", range(fixed(0)), "rho"},
      {"rho -1", range(fixed(-1)), "rho"},
      {"rho inf", range(fixed(kInf)), "rho"},
      {"rho 1e-300 (below what devices answer)", range(fixed(1e-300)), "rho"},
      {"adaptive with rho nan", range(adaptive_nan), "rho"},
      {"beta nan", range(beta_nan), "beta"},
      {"beta 1", range(beta_one), "beta"},
      {"min_coverage nan", range(coverage_nan), "min_coverage"},
      {"target relative nan", range(pm1, target(kNaN, 0)), "relative"},
      {"target 0 and 0", range(pm1, target(0, 0)), "target"},
      {"target absolute inf", range(pm1, target(0, kInf)), "absolute"},
      {"growth nan", range(pm1, target(0.1, 0, kNaN)), "growth"},
      {"first nan", range(pm1, target(0.1, 0, 2, kNaN)), "first"},
      {"kde bandwidth nan",
       [](v1::Analyst::Stub& stub, grpc::ClientContext& context) {
         v1::KdeQuery q;
         *q.mutable_options() = fixed(0.1);
         q.add_point(1), q.add_point(2);
         q.set_bandwidth(kNaN);
         v1::QueryResult result;
         return stub.Kde(&context, q, &result);
       },
       "bandwidth"},
      {"knn point inf",
       [](v1::Analyst::Stub& stub, grpc::ClientContext& context) {
         v1::KnnQuery q;
         *q.mutable_options() = fixed(0.1);
         q.add_point(kInf), q.add_point(2);
         q.set_k(2);
         v1::QueryResult result;
         return stub.Knn(&context, q, &result);
       },
       "p"},
      {"threshold q nan",
       [](v1::Analyst::Stub& stub, grpc::ClientContext& context) {
         v1::ThresholdQuery q;
         *q.mutable_options() = fixed(0.1);
         q.set_device_id("device-0");
         q.set_q(kNaN);
         q.set_population(100);
         v1::QueryResult result;
         return stub.Threshold(&context, q, &result);
       },
       "q"},
      {"top regions growth nan",
       [&](v1::Analyst::Stub& stub, grpc::ClientContext& context) {
         v1::TopRegionsQuery q;
         *q.mutable_options() = fixed(0.1);
         *q.add_regions() = box;
         q.set_k(1);
         *q.mutable_schedule() = target(0, 0, kNaN);
         v1::QueryResult result;
         return stub.TopRegions(&context, q, &result);
       },
       "growth"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const grpc::Status status = send_by_hand(live.address, c.call);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    INFO(status.error_message());
    CHECK(status.error_message().rfind(c.parameter, 0) == 0);  // "p[0]: ..." names p
  }
  // Nothing was asked, charged, counted or written down.
  const auto counters = live.service->gateway().counters();
  CHECK(counters.rounds == 0);
  CHECK(counters.requests == 0);
  for (std::size_t i = 0; i < n; ++i) CHECK(live.swarm->spent(i) == 0);
  auto analyst = *transport::AnalystClient::connect({live.address, "", "", 30s, std::nullopt});
  CHECK(analyst.status()->queries == 0);
  test::StateReader state(state_path);
  for (const auto& [device, remaining] : state.mirror())
    CHECK(remaining == DeviceConfig::cgp(1.0)->rho_capacity());
  CHECK(state.intents() == 0);

  // The same through cgp-analyst against the live coordinator: --rho 1e-300 passes the command
  // line (finite, ≥ 0) and the service refuses it by name (exit 1); nothing is charged.
  {
    const fs::path credential = scratch.dir / "analyst";
    std::ofstream(credential) << "unused\n";
    const fs::path err = scratch.dir / "err.txt";
    std::vector<std::string> arguments = {
        CGP_ANALYST_PATH, "--coordinator", live.address,  "--credential", credential.string(),
        "range",          "--box",         "0,0,500,500", "--rho",        "1e-300"};
    std::vector<char*> argv;
    for (auto& a : arguments) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    waitpid(pid, &status, 0);
    std::stringstream text;
    text << std::ifstream(err).rdbuf();
    INFO(text.str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(text.str().find("rho") != std::string::npos);
  }
  CHECK(live.service->gateway().counters().requests == 0);
  for (std::size_t i = 0; i < n; ++i) CHECK(live.swarm->spent(i) == 0);
}

TEST_CASE("service: counters are totals across restarts and enrolled leaves revoked devices out",
          "[transport][trust]") {
  CGP_SEEDED(3302);
  Scratch scratch("cgp-trust-counters");
  const std::string state_path = (scratch.dir / "state.db").string();
  const std::size_t n = 8;
  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;
  query.query_id = "";  // the coordinator names each query
  transport::RemoteStatus before;
  {
    Live live(state_path, n, seed);
    auto analyst = *transport::AnalystClient::connect({live.address, "", "", 30s, std::nullopt});
    for (int q = 0; q < 3; ++q) {
      auto counted = analyst.range_count(
          range, transport::RemoteCharges::fixed(coordinator::Charge{0.05}), query);
      INFO((counted ? std::string() : counted.error().message));
      REQUIRE(counted.has_value());
    }
    REQUIRE(live.service->revoke("device-3").has_value());
    before = *analyst.status();
    CHECK(before.enrolled == n - 1);  // a revoked device is not enrolled any more
    CHECK(before.queries == 3);
    CHECK(before.rounds == 3);
    CHECK(before.requests == 3 * n);
    CHECK(before.replies == 3 * n);
  }
  Live live(state_path, n, seed);
  auto analyst = *transport::AnalystClient::connect({live.address, "", "", 30s, std::nullopt});
  const auto after = *analyst.status();
  // Totals over the coordinator's life (Prometheus counters never go down).
  CHECK(after.queries == before.queries);
  CHECK(after.rounds == before.rounds);
  CHECK(after.requests == before.requests);
  CHECK(after.replies == before.replies);
  CHECK(after.unanswered == before.unanswered);
  CHECK(after.late_replies >= before.late_replies);
  REQUIRE(
      analyst.range_count(range, transport::RemoteCharges::fixed(coordinator::Charge{0.05}), query)
          .has_value());
  const auto later = *analyst.status();
  CHECK(later.queries == before.queries + 1);
  CHECK(later.rounds == before.rounds + 1);
  CHECK(later.requests == before.requests + n);
}

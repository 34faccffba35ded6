// What the coordinator tells its analyst and its operator. On 3f97682 a NaN ρ sent by
// hand ran an adaptive query and charged every device, ρ = 1e-300 travelled to every device
// before each rejected it, and a restart set every counter but `queries` back to 0 while
// `enrolled` still counted revoked devices.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
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
  std::unique_ptr<swarm::DeviceSwarm> swarm;
  std::string address;
  Live(const std::string& state_path, std::size_t n, std::uint64_t seed) {
    options.device_ids = test::device_ids(n);
    options.state_path = state_path;
    service = *transport::CoordinatorService::start(options);
    address = "127.0.0.1:" + std::to_string(service->port());
    swarm::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(1.0);
    swarm_options.seed = seed;
    swarm = *swarm::DeviceSwarm::start(swarm_options,
                                       test::swarm_members(test::uniform_square(n, 1000, seed), n));
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

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// cgp-analyst against `address`, its stdout and stderr kept.
CliRun run_analyst(const fs::path& scratch, const std::string& address,
                   std::vector<std::string> command) {
  const fs::path credential = scratch / "analyst", out = scratch / "out.txt",
                 err = scratch / "err.txt";
  std::ofstream(credential) << "unused\n";  // the coordinator checks none
  std::vector<std::string> arguments = {CGP_ANALYST_PATH, "--coordinator", address, "--credential",
                                        credential.string()};
  arguments.insert(arguments.end(), command.begin(), command.end());
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream out_text, err_text;
  out_text << std::ifstream(out).rdbuf();
  err_text << std::ifstream(err).rdbuf();
  run.out = out_text.str();
  run.err = err_text.str();
  return run;
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
  v1::QueryOptions pm1_64 = fixed(1e-4);
  pm1_64.set_method("PM1");
  pm1_64.set_rounds(64);

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
      // Above what devices answer as a whole, below it in each of 64 rounds.
      {"rho 1e-4 over 64 rounds", range(pm1_64), "rho"},
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
  auto analyst =
      *analyst::AnalystClient::connect({live.address, "", "", 30s, std::nullopt, std::nullopt});
  CHECK(analyst.status()->queries == 0);
  test::StateReader state(state_path);
  for (const auto& [device, remaining] : state.mirror())
    CHECK(remaining == DeviceConfig::cgp(1.0)->rho_capacity());
  CHECK(state.intents() == 0);

  // The five through cgp-analyst against the live coordinator: each refused by name
  // (exit 2 on the command line, exit 1 from the service), and nothing is charged.
  struct CliCase {
    std::vector<std::string> flags;
    int exit_code;
    const char* named;
  };
  const std::vector<CliCase> cli_cases = {
      {{"--rho", "nan"}, 2, "--rho"},        // ran adaptive and charged every device
      {{"--target", "nan"}, 2, "--target"},  // was ignored: a full-charge plain query
      {{"--target", "0"}, 2, "--target"},    // the same
      {{"--beta", "0"}, 2, "--beta"},        // help says (0, 1)
      {{"--rho", "1e-300"}, 1, "rho"},       // passes the command line; the service refuses it
  };
  for (const CliCase& c : cli_cases) {
    std::vector<std::string> command = {"range", "--box", "0,0,500,500"};
    command.insert(command.end(), c.flags.begin(), c.flags.end());
    if (c.flags[0] == "--target") command.insert(command.end(), {"--rho", "0.1"});
    const auto run = run_analyst(scratch.dir, live.address, command);
    INFO(c.flags[0] << " " << c.flags[1] << ": " << run.err);
    CHECK(run.exit_code == c.exit_code);
    CHECK(run.err.find(c.named) != std::string::npos);
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
  analyst::RemoteStatus before;
  {
    Live live(state_path, n, seed);
    auto analyst =
        *analyst::AnalystClient::connect({live.address, "", "", 30s, std::nullopt, std::nullopt});
    for (int q = 0; q < 3; ++q) {
      auto counted = analyst.range_count(
          range, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), query);
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
  auto analyst =
      *analyst::AnalystClient::connect({live.address, "", "", 30s, std::nullopt, std::nullopt});
  const auto after = *analyst.status();
  // Totals over the coordinator's life (Prometheus counters never go down).
  CHECK(after.queries == before.queries);
  CHECK(after.rounds == before.rounds);
  CHECK(after.requests == before.requests);
  CHECK(after.replies == before.replies);
  CHECK(after.unanswered == before.unanswered);
  CHECK(after.late_replies >= before.late_replies);
  REQUIRE(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), query)
          .has_value());
  const auto later = *analyst.status();
  CHECK(later.queries == before.queries + 1);
  CHECK(later.rounds == before.rounds + 1);
  CHECK(later.requests == before.requests + n);
}

TEST_CASE("service: a count whose missing users are the ones inside is not a success",
          "[transport][trust]") {
  // On 3f97682 a range count returned 0 (true 11) with exit 0: the users the
  // mirror showed as spent were exactly the ones inside the box, and 181/200 passed
  // --min-coverage 0.9. Now the result carries the interval the missing users allow, and a
  // share of the answer above max_missing_share (default 0.1) fails the query.
  CGP_SEEDED(3303);
  Scratch scratch("cgp-trust-missing");
  const std::size_t n = 40, inside = 4;
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(n);
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  std::vector<swarm::SwarmMember> members;
  std::vector<coordinator::UserId> inside_users;
  for (std::size_t i = 0; i < n; ++i) {
    const bool in = i < inside;
    if (in) inside_users.push_back(static_cast<coordinator::UserId>(i));
    const double x = in ? 100.0 + 10 * static_cast<double>(i) : 800.0;
    const double y = in ? 100.0 : 600.0 + 5 * static_cast<double>(i);
    members.push_back({options.device_ids[i], "", {x, y}});
  }
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  swarm_options.seed = seed;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, members);
  REQUIRE(service->gateway().wait_for_devices(n, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  // The users inside spend nearly all their budget first (another analyst's queries).
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;
  query.query_id = "spend-inside";
  REQUIRE(analyst
              .range_count(*geometry::Box::create(std::array{0.0, 0.0}, std::array{1.0, 1.0}),
                           analyst::RemoteCharges::fixed(coordinator::Charge{0.98}, inside_users),
                           query)
              .has_value());

  // A count of the box [0, 500]² at ρ = 0.05: the 4 users inside cannot pay and are left out.
  const auto biased = run_analyst(
      scratch.dir, address,
      {"range", "--box", "0,0,500,500", "--rho", "0.05", "--method", "BM1", "--id", "biased"});
  INFO(biased.err);
  CHECK(biased.exit_code == 1);  // at the default --max-missing-share 0.1
  CHECK(biased.err.find("max_missing_share") != std::string::npos);
  const auto kept = run_analyst(scratch.dir, address, {"result", "--id", "biased"});
  REQUIRE(kept.exit_code == 0);
  const auto result = nlohmann::json::parse(kept.out);
  CHECK(result["coverage"]["answered"] == n - inside);  // 36 of 40: min_coverage 0.9 passes
  CHECK(result["coverage"]["valid"] == true);
  CHECK(result["missing"]["users"] == inside);
  // The truth (4) lies in the interval the missing users allow; the estimate alone misses it.
  const double lower = result["missing"]["lower"], upper = result["missing"]["upper"];
  CHECK(lower <= static_cast<double>(inside));
  CHECK(upper >= static_cast<double>(inside));
  CHECK(result["estimate"] == 0.0);  // σ ≈ 3 m, every answering user 100 m or more outside
  CHECK(result["missing"]["share"] == 1.0);
  CHECK(result["missing"]["valid"] == false);

  // An analyst who accepts that much gets the estimate with its interval, exit 0.
  const auto accepted = run_analyst(scratch.dir, address,
                                    {"--max-missing-share", "1", "range", "--box", "0,0,500,500",
                                     "--rho", "0.05", "--method", "BM1", "--id", "accepted"});
  INFO(accepted.err);
  CHECK(accepted.exit_code == 0);
  CHECK(nlohmann::json::parse(accepted.out)["missing"]["upper"] == 4.0);

  // KDE and kNN say the same in their terms.
  auto lenient = *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, 1.0});
  const double at[2] = {115, 100}, bandwidth = 50;
  query.query_id = "";
  auto density =
      lenient.kde(at, bandwidth, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), query);
  INFO((density ? std::string() : density.error().message));
  REQUIRE(density.has_value());
  double truth = 0;  // every user's kernel, over all 40
  for (const auto& m : members) {
    const double dx = m.location[0] - at[0], dy = m.location[1] - at[1];
    truth += std::exp(-(dx * dx + dy * dy) / (2 * bandwidth * bandwidth));
  }
  truth /= static_cast<double>(n);
  CHECK(density->missing.users == inside);
  CHECK(density->missing.lower <= truth);
  CHECK(density->missing.upper >= truth);
  CHECK(density->missing.upper - density->missing.lower ==
        Approx(static_cast<double>(inside) / n).epsilon(1e-12));
  auto nearest =
      lenient.knn(at, 2, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), query);
  REQUIRE(nearest.has_value());
  CHECK(nearest->missing.upper == 2);  // both neighbours could be missing users (they are)
  CHECK(nearest->missing.share == 1.0);
  auto strict = *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, 0.5});
  auto refused = strict.knn(at, 2, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), query);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::incomplete_query);
  CHECK(refused.error().parameter == "max_missing_share");
  swarm.reset();
  service.reset();
}

TEST_CASE("service: status and results answer while a query waits for its devices",
          "[transport][trust]") {
  // On 3f97682 status and GetResult waited behind the running query (2.7 s
  // behind one; time-outs in a storm of queries).
  CGP_SEEDED(3304);
  const std::size_t n = 3;
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(n);
  options.round_deadline = 30s;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  const auto points = test::uniform_square(n, 100, seed);
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 60s, std::nullopt, std::nullopt});
  double lo[2] = {0, 0}, hi[2] = {50, 50};
  const geometry::Region box = *geometry::Box::create(lo, hi);
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;
  {
    // A first query, answered at once, to read back later.
    test::ThreadedDevices quick(*DeviceConfig::cgp(1.0), points, seed, address, 0, n, n);
    REQUIRE(service->gateway().wait_for_devices(n, 30s));
    query.query_id = "done";
    REQUIRE(analyst.range_count(box, analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query)
                .has_value());
  }
  REQUIRE(test::eventually([&] { return service->gateway().connected() == 0; }));
  // Devices that answer each request 5 s late: the next query holds the query lock that long.
  test::ThreadedDevices slow(*DeviceConfig::cgp(1.0), points, seed + 1, address, 0, n, n, 5000ms);
  REQUIRE(service->gateway().wait_for_devices(n, 30s));
  std::atomic<bool> finished{false};
  std::jthread running([&] {
    auto other =
        *analyst::AnalystClient::connect({address, "", "", 60s, std::nullopt, std::nullopt});
    query.query_id = "slow";
    (void)other.range_count(box, analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query);
    finished = true;
  });
  // The round's requests are out within this second; its replies come 5 s after them.
  std::this_thread::sleep_for(1s);
  REQUIRE_FALSE(finished);
  auto status = analyst.status();
  auto kept = analyst.result("done");
  const bool answered_during_query = !finished;  // the query still waits for its replies
  REQUIRE(status.has_value());
  CHECK(status->queries == 1);
  REQUIRE(kept.has_value());
  CHECK(kept->query_id == "done");
  CHECK(answered_during_query);
  running.join();
  CHECK(finished);
}

TEST_CASE("service: a one-user query's stored result grows with the users it touched",
          "[transport][state]") {
  // Every result carried a dense per-user `charged` array (8 bytes per
  // enrolled device: 8 MB at 10^6 devices for a one-user query). Now it carries the charged users
  // only, and the client rebuilds the dense view from `users`.
  const std::size_t enrolled = 20000;
  Scratch scratch("cgp-trust-sparse");
  const std::string state_path = (scratch.dir / "state.db").string();
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(enrolled);
  options.state_path = state_path;
  options.round_deadline = 5s;
  {
    auto service = *transport::CoordinatorService::start(options);
    const std::string address = "127.0.0.1:" + std::to_string(service->port());
    swarm::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(1.0);
    swarm_options.seed = 36;
    // Only user 0 is connected: the query asks it alone.
    auto swarm = *swarm::DeviceSwarm::start(
        swarm_options, test::swarm_members(test::uniform_square(1, 1000, 36), 1));
    REQUIRE(service->gateway().wait_for_devices(1, 30s));
    auto analyst =
        *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
    double lo[2] = {-5, -5}, hi[2] = {2000, 2000};
    coordinator::QueryOptions query;
    query.query_id = "one-user";
    auto counted =
        analyst.range_count(*geometry::Box::create(lo, hi),
                            analyst::RemoteCharges::fixed(coordinator::Charge{0.01}, {0}), query);
    REQUIRE(counted.has_value());
    // The client's view is as before: dense, one entry per enrolled user.
    REQUIRE(counted->report.charged.size() == enrolled);
    CHECK(counted->report.charged[0].value() > 0);
    CHECK(std::count_if(counted->report.charged.begin(), counted->report.charged.end(),
                        [](coordinator::Charge c) { return c.value() > 0; }) == 1);
    swarm.reset();
  }
  // On disk: a few dozen bytes, where the dense array alone was 8 × 20,000 = 160,000.
  std::string stored;
  {
    test::StateReader state(state_path);
    stored = state.result_bytes("one-user");
  }
  REQUIRE_FALSE(stored.empty());
  INFO("stored result: " << stored.size() << " bytes");
  CHECK(stored.size() < 1000);
  v1::QueryResult result;
  REQUIRE(result.ParseFromString(stored));
  CHECK(result.charged_size() == 0);
  REQUIRE(result.charges_size() == 1);
  CHECK(result.charges(0).user() == 0);
  CHECK(result.users() == enrolled);

  // A result written before (dense) is made sparse when the state is read at start.
  v1::QueryResult old_format = result;
  old_format.clear_charges();
  old_format.set_users(0);
  old_format.set_query_id("dense");
  for (std::size_t u = 0; u < enrolled; ++u) old_format.add_charged(u == 7 ? 0.25 : 0.0);
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(state_path.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* insert = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "INSERT INTO results (query_id, finished_unix, result) "
                               "VALUES ('dense', strftime('%s','now'), ?1)",
                               -1, &insert, nullptr) == SQLITE_OK);
    const std::string bytes = old_format.SerializeAsString();
    sqlite3_bind_blob(insert, 1, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
    CHECK(sqlite3_step(insert) == SQLITE_DONE);
    sqlite3_finalize(insert);
    sqlite3_close(db);
  }
  auto service = *transport::CoordinatorService::start(options);
  auto analyst = *analyst::AnalystClient::connect(
      {"127.0.0.1:" + std::to_string(service->port()), "", "", 30s, std::nullopt, std::nullopt});
  auto dense = analyst.result("dense");
  REQUIRE(dense.has_value());
  REQUIRE(dense->report.charged.size() == enrolled);
  CHECK(dense->report.charged[7].value() == 0.25);
  CHECK(std::count_if(dense->report.charged.begin(), dense->report.charged.end(),
                      [](coordinator::Charge c) { return c.value() > 0; }) == 1);
}

namespace {
// A coordinator that lies in its results: GetResult answers with whatever the test sets.
class LyingCoordinator final : public v1::Analyst::Service {
 public:
  v1::QueryResult answer;
  grpc::Status GetResult(grpc::ServerContext*, const v1::ResultRequest*,
                         v1::QueryResult* out) override {
    *out = answer;
    return grpc::Status::OK;
  }
};
}  // namespace

TEST_CASE("analyst client: a result naming too many users or charging outside them is refused",
          "[transport]") {
  LyingCoordinator lying;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&lying);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  auto analyst = *analyst::AnalystClient::connect(
      {"127.0.0.1:" + std::to_string(port), "", "", 10s, std::nullopt, std::nullopt});
  struct Lie {
    std::uint32_t users, user;
    double rho;
    const char* parameter;
  };
  const Lie lies[] = {
      {std::numeric_limits<std::uint32_t>::max(), 0, 0.1, "users"},  // 32 GB if believed
      {10, 10, 0.1, "charges"},                                      // past the last user
      {10, 3, std::numeric_limits<double>::quiet_NaN(), "charges"},
      {10, 3, -1.0, "charges"},
  };
  for (const auto& lie : lies) {
    lying.answer.Clear();
    lying.answer.set_query_id("q");
    lying.answer.set_users(lie.users);
    auto* charge = lying.answer.add_charges();
    charge->set_user(lie.user);
    charge->set_rho(lie.rho);
    auto result = analyst.result("q");
    INFO("users " << lie.users << " user " << lie.user << " rho " << lie.rho);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().parameter == lie.parameter);
  }
  // A page that does not move on (the same page again and again) is refused, not followed.
  lying.answer.Clear();
  lying.answer.set_users(10);
  lying.answer.set_users_next(5);
  auto looping = analyst.result("q");
  REQUIRE_FALSE(looping.has_value());
  CHECK(looping.error().parameter == "users_next");
  // The same message told straight is taken.
  lying.answer.Clear();
  lying.answer.set_users(10);
  auto* charge = lying.answer.add_charges();
  charge->set_user(9);
  charge->set_rho(0.5);
  auto result = analyst.result("q");
  REQUIRE(result.has_value());
  CHECK(coordinator::charge_values(result->report.charged) ==
        std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0.5});
  server->Shutdown();
}

TEST_CASE("service: a large result comes in pages of user indices and the client joins them",
          "[transport][state]") {
  // Results paged through GetResult. Pages of at most 3 entries here, over 8
  // users of whom 6 answer: the query's answer and GetResult both give every page's entries.
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(8);
  options.result_page_entries = 3;
  options.round_deadline = 2s;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  swarm_options.seed = 364;
  auto swarm = *swarm::DeviceSwarm::start(
      swarm_options, test::swarm_members(test::uniform_square(6, 1000, 364), 6));
  REQUIRE(service->gateway().wait_for_devices(6, 30s));
  auto analyst = *analyst::AnalystClient::connect({address, "", "", 30s, 0.0, 1.0});
  double lo[2] = {-5, -5}, hi[2] = {2000, 2000};
  coordinator::QueryOptions query;
  query.query_id = "paged";
  auto counted =
      analyst.range_count(*geometry::Box::create(lo, hi),
                          analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), query);
  REQUIRE(counted.has_value());
  std::vector<coordinator::UserId> charged;
  for (std::size_t u = 0; u < counted->report.charged.size(); ++u)
    if (counted->report.charged[u].value() > 0)
      charged.push_back(static_cast<coordinator::UserId>(u));
  CHECK(counted->report.charged.size() == 8);
  CHECK(charged.size() >= 6);  // every answering user (the silent ones may be charged too)
  CHECK(counted->report.unanswered == std::vector<coordinator::UserId>{6, 7});
  // The same through GetResult, and one page by hand: at most 3 entries, and where it stops.
  auto stored = analyst.result("paged");
  REQUIRE(stored.has_value());
  CHECK(stored->report.charged == counted->report.charged);
  CHECK(stored->report.unanswered == counted->report.unanswered);
  auto page = [&](std::uint32_t from) {
    v1::QueryResult out;
    auto status = send_by_hand(address, [&](v1::Analyst::Stub& stub, grpc::ClientContext& c) {
      v1::ResultRequest request;
      request.set_query_id("paged");
      request.set_users_from(from);
      return stub.GetResult(&c, request, &out);
    });
    REQUIRE(status.ok());
    return out;
  };
  const auto first = page(0);
  CHECK(first.users_from() == 0);
  CHECK(first.charges_size() + first.unanswered_size() <= 3);
  CHECK(first.users_next() > 0);
  std::size_t entries = 0, pages = 0;
  for (std::uint32_t from = 0;; ++pages) {
    const auto next = page(from);
    entries += static_cast<std::size_t>(next.charges_size() + next.unanswered_size() +
                                        next.refused_size() + next.rejected_size());
    for (const auto& charge : next.charges()) {
      CHECK(charge.user() >= from);
      if (next.users_next() != 0) CHECK(charge.user() < next.users_next());
    }
    if (next.users_next() == 0) break;
    REQUIRE(next.users_next() > from);
    from = next.users_next();
  }
  CHECK(pages >= 2);
  CHECK(entries == charged.size() + 2);
  swarm.reset();
}

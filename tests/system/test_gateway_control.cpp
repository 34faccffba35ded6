// The live tier's control stream (cgp/transport/gateway_control.hpp, docs/cluster.md): three
// gateways, each with its shard of a simulated fleet, attached to a coordinator's ControlServer
// over gRPC, run range, KDE and kNN queries whose collectives the coordinator merges: the
// answers, per-round counts and charges are bit-identical to the whole fleet in one process.
// Then the failures: a gateway lost mid-query (the others finish, counting what it had decided),
// every gateway lost, a forged collective, a refused credential.
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/v1/gateway_control.pb.h"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

namespace {

constexpr double kBudget = 1.0;
constexpr std::size_t kUsers = 3000;

// What a query's result is reduced to for the comparison: the estimate's bits, each round's
// asked and eliminated counts, kNN's neighbours, and the local users' charges by global id.
struct Answer {
  double estimate = 0;
  std::vector<std::size_t> asked, eliminated;
  std::vector<UserId> neighbours;
  std::vector<std::pair<UserId, double>> charged;
  bool operator==(const Answer& other) const {
    return std::memcmp(&estimate, &other.estimate, sizeof estimate) == 0 && asked == other.asked &&
           eliminated == other.eliminated && neighbours == other.neighbours;
  }
};

std::string encode(const Answer& answer) {
  std::string out(reinterpret_cast<const char*>(&answer.estimate), sizeof(double));
  for (auto v : answer.asked) out += "," + std::to_string(v);
  out += "|";
  for (auto v : answer.eliminated) out += "," + std::to_string(v);
  out += "|";
  for (auto v : answer.neighbours) out += "," + std::to_string(v);
  return out;
}

// One shard of the fleet: users [first, first + size) of `points`, their own mirror across
// queries, as a gateway keeps them.
class ShardFleet {
 public:
  ShardFleet(const std::vector<double>& points, std::size_t first, std::size_t size,
             std::uint64_t seed)
      : first_(first),
        points_(points.begin() + static_cast<std::ptrdiff_t>(2 * first),
                points.begin() + static_cast<std::ptrdiff_t>(2 * (first + size))),
        mirror_(size, kBudget) {
    simulation::SimulatedFleetOptions options;
    options.threads = 1;
    options.first_user = static_cast<UserId>(first);
    fleet_.emplace(*simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points_, 2,
                                                       seed, options));
  }

  // The query `kind` ("range", "kde", "knn") over this shard, meeting the others in `reducer`
  // (null: this shard is the whole fleet).
  Expected<Answer> run(const std::string& kind, const std::string& query_id,
                       ShardReducer* reducer) {
    QueryOptions options;
    options.shard = {static_cast<UserId>(first_), kUsers, reducer};
    options.rounds = 6;
    options.query_id = query_id;
    const double p[2] = {4000, 4000};
    Answer answer;
    if (kind == "range") {
      const double lo[2] = {3000, 2000}, hi[2] = {6000, 7000};
      options.method = Method::PM1;
      CGP_ASSIGN_OR_RETURN(auto result,
                           range_count(*fleet_, mirror_, *geometry::Box::create(lo, hi),
                                       test::charge_everyone(1e-3), options));
      answer.estimate = result.estimate;
      answer.asked = result.report.asked_per_round;
      answer.eliminated = result.report.eliminated_per_round;
    } else if (kind == "kde") {
      options.method = Method::PM0;
      CGP_ASSIGN_OR_RETURN(auto result,
                           kde(*fleet_, mirror_, p, 600, test::charge_everyone(1e-3), options));
      answer.estimate = result.estimate;
      answer.asked = result.report.asked_per_round;
    } else {
      options.method = Method::PM1;
      CGP_ASSIGN_OR_RETURN(auto result,
                           knn(*fleet_, mirror_, p, 15, test::charge_everyone(1e-3), options));
      answer.neighbours = result.neighbours;
      answer.asked = result.report.asked_per_round;
    }
    return answer;
  }

 private:
  std::size_t first_;
  std::vector<double> points_;
  BudgetMirror mirror_;
  std::optional<simulation::SimulatedFleet> fleet_;
};

transport::ControlServerOptions server_options() {
  transport::ControlServerOptions options;
  options.authenticate = [](const std::string& id, const std::string& credential) {
    return credential == "secret-of-" + id;
  };
  options.coordinator_epoch = 7;
  options.query_deadline = 60s;
  return options;
}

transport::ControlLinkOptions link_options(int port, const std::string& id) {
  transport::ControlLinkOptions options;
  options.coordinator_address = "127.0.0.1:" + std::to_string(port);
  options.gateway_id = id;
  options.credential = "secret-of-" + id;
  return options;
}

// A handler that runs the query on `shard`.
transport::QueryHandler shard_handler(ShardFleet& shard) {
  return [&shard](const v1::QueryStart& start, ShardReducer& reducer,
                  const std::atomic<bool>&) -> Expected<std::string> {
    CGP_ASSIGN_OR_RETURN(auto answer, shard.run(start.kind(), start.query_id(), &reducer));
    return encode(answer);
  };
}

}  // namespace

TEST_CASE("gateway control: three gateways answer as the whole fleet does, bit for bit",
          "[transport][cluster]") {
  CGP_SEEDED(30);
  const auto points = test::uniform_square(kUsers, 10000, seed);
  ShardFleet whole(points, 0, kUsers, seed);

  auto server = *transport::ControlServer::start(server_options());
  std::vector<std::unique_ptr<ShardFleet>> shards;
  std::vector<std::unique_ptr<transport::ControlLink>> links;
  for (std::size_t g = 0; g < 3; ++g) {
    // Shards need not be block-aligned: 900, 1100 and 1000 users.
    const std::size_t first = g == 0 ? 0 : (g == 1 ? 900 : 2000);
    const std::size_t size = g == 0 ? 900 : (g == 1 ? 1100 : 1000);
    shards.push_back(std::make_unique<ShardFleet>(points, first, size, seed));
    auto link = transport::ControlLink::connect(
        link_options(server->port(), "gw-" + std::to_string(g)), shard_handler(*shards.back()));
    REQUIRE(link);
    CHECK((*link)->coordinator_epoch() == 7);
    links.push_back(std::move(*link));
  }
  REQUIRE(server->wait_for_gateways(3, 10s));

  for (const std::string kind : {"range", "kde", "knn", "range"}) {
    INFO(kind);
    const std::string id = "q-" + kind + std::to_string(links[0]->queries_run());
    auto expected = whole.run(kind, id, nullptr);
    REQUIRE(expected);
    auto outcomes = server->run_query(id, kind, "", kUsers);
    REQUIRE(outcomes);
    REQUIRE(outcomes->size() == 3);
    for (const auto& outcome : *outcomes) {
      INFO(outcome.gateway.gateway_id);
      REQUIRE(outcome.result);
      CHECK(*outcome.result == encode(*expected));
    }
  }
}

namespace {

// Passes every collective on to the gateway's reducer and remembers the decided counts it noted
// and its last tally (its own part and the merge); `after_first_note` runs once, right after
// the sum that carried the first note went up and came back.
class RecordingReducer final : public ShardReducer {
 public:
  RecordingReducer(ShardReducer& inner, std::function<void()> after_first_note = {})
      : inner_(inner), after_first_note_(std::move(after_first_note)) {}
  void sum(std::span<std::uint64_t> values) override {
    inner_.sum(values);
    if (notes == 1 && after_first_note_) std::exchange(after_first_note_, {})();
  }
  std::vector<double> gather(std::span<const double> local) override {
    return inner_.gather(local);
  }
  void tally(std::span<std::uint64_t, 2> values) override {
    local_tally = {values[0], values[1]};
    inner_.tally(values);
    merged_tally = {values[0], values[1]};
  }
  void note_decided(std::span<const std::uint64_t, 2> decided) override {
    inner_.note_decided(decided);
    noted = {decided[0], decided[1]};
    ++notes;
  }
  std::array<std::uint64_t, 2> noted{}, local_tally{}, merged_tally{};
  int notes = 0;

 private:
  ShardReducer& inner_;
  std::function<void()> after_first_note_;
};

}  // namespace

TEST_CASE(
    "gateway control: a gateway lost mid-query: the others finish it, counting what it had "
    "decided",
    "[transport][cluster]") {
  CGP_SEEDED(31);
  const auto points = test::uniform_square(kUsers, 10000, seed);
  auto server = *transport::ControlServer::start(server_options());
  ShardFleet first(points, 0, 1000, seed), second(points, 1000, 1000, seed),
      third(points, 2000, 1000, seed);
  std::mutex seen_mutex;
  std::map<std::string, bool> saw_abort;  // query id -> a survivor's engine was told to stop
  std::map<std::string, std::vector<std::array<std::uint64_t, 2>>> local_tallies;
  std::map<std::string, std::array<std::uint64_t, 2>> merged_tally;
  auto survivor_handler = [&](ShardFleet& shard) -> transport::QueryHandler {
    return [&](const v1::QueryStart& start, ShardReducer& reducer,
               const std::atomic<bool>& aborted) -> Expected<std::string> {
      RecordingReducer recording(reducer);
      auto answer = shard.run(start.kind(), start.query_id(), &recording);
      std::lock_guard lock(seen_mutex);
      saw_abort[start.query_id()] = saw_abort[start.query_id()] || aborted.load();
      local_tallies[start.query_id()].push_back(recording.local_tally);
      merged_tally[start.query_id()] = recording.merged_tally;
      if (!answer) return answer.error();
      return encode(*answer);
    };
  };
  auto a = *transport::ControlLink::connect(link_options(server->port(), "gw-a"),
                                            survivor_handler(first));
  auto b = *transport::ControlLink::connect(link_options(server->port(), "gw-b"),
                                            survivor_handler(second));
  // The third gateway dies right after its first round: its decided counts went up with that
  // round's sum, then its link goes away mid-query.
  std::unique_ptr<transport::ControlLink> doomed;
  std::atomic<bool> drop{false};
  std::array<std::uint64_t, 2> doomed_noted{};
  auto doomed_options = link_options(server->port(), "gw-c");
  doomed_options.shards = {{7, 3}, {9, 3}};
  doomed = *transport::ControlLink::connect(
      doomed_options,
      [&](const v1::QueryStart& start, ShardReducer& reducer,
          const std::atomic<bool>& aborted) -> Expected<std::string> {
        RecordingReducer* self = nullptr;
        RecordingReducer recording(reducer, [&] {
          doomed_noted = self->noted;
          drop = true;
          while (!aborted) std::this_thread::sleep_for(5ms);
        });
        self = &recording;
        (void)third.run(start.kind(), start.query_id(), &recording);
        return std::string("never reported");
      });
  REQUIRE(server->wait_for_gateways(3, 10s));
  std::jthread killer([&] {
    while (!drop) std::this_thread::sleep_for(5ms);
    doomed.reset();  // as a gateway process that died: its stream ends
  });
  auto outcomes = server->run_query("q-lost", "range", "", kUsers);
  killer.join();
  REQUIRE(outcomes);
  REQUIRE(outcomes->size() == 3);
  // In gateway-id order: the survivors' results agree; the lost one is named with its shards.
  REQUIRE((*outcomes)[0].result);
  REQUIRE((*outcomes)[1].result);
  CHECK(*(*outcomes)[0].result == *(*outcomes)[1].result);
  const auto& lost = (*outcomes)[2];
  CHECK(lost.gateway.gateway_id == "gw-c");
  CHECK(lost.lost);
  REQUIRE_FALSE(lost.result);
  CHECK(lost.result.error().parameter == "gateway");
  CHECK(lost.result.error().code == ErrorCode::unavailable);
  CHECK(lost.gateway.shards == doomed_options.shards);
  {
    // The final tally counted the lost gateway's decided users (its noted counts), and the
    // survivors' own parts: nothing else.
    std::lock_guard lock(seen_mutex);
    CHECK_FALSE(saw_abort["q-lost"]);
    const auto& parts = local_tallies["q-lost"];
    REQUIRE(parts.size() == 2);
    CHECK(doomed_noted[0] + doomed_noted[1] > 0);  // it had decided users: the test means it
    CHECK(merged_tally["q-lost"][0] == parts[0][0] + parts[1][0] + doomed_noted[0]);
    CHECK(merged_tally["q-lost"][1] == parts[0][1] + parts[1][1] + doomed_noted[1]);
  }
  // The next query runs on the gateways left.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (server->gateways().size() != 2 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(5ms);
  REQUIRE(server->gateways().size() == 2);
  auto next = server->run_query("q-next", "kde", "", kUsers);
  REQUIRE(next);
  CHECK(next->size() == 2);
  std::lock_guard lock(seen_mutex);
  CHECK_FALSE(saw_abort["q-next"]);
}

TEST_CASE("gateway control: when every gateway of a query is lost it fails by name",
          "[transport][cluster]") {
  auto server = *transport::ControlServer::start(server_options());
  std::unique_ptr<transport::ControlLink> doomed;
  std::atomic<bool> drop{false};
  doomed = *transport::ControlLink::connect(
      link_options(server->port(), "gw-only"),
      [&](const v1::QueryStart&, ShardReducer& reducer,
          const std::atomic<bool>& aborted) -> Expected<std::string> {
        std::uint64_t none_failed = 0;
        reducer.sum(std::span(&none_failed, 1));
        drop = true;
        while (!aborted) std::this_thread::sleep_for(5ms);
        return std::string("never reported");
      });
  REQUIRE(server->wait_for_gateways(1, 10s));
  std::jthread killer([&] {
    while (!drop) std::this_thread::sleep_for(5ms);
    doomed.reset();
  });
  auto failed = server->run_query("q-alone", "range", "", kUsers);
  killer.join();
  REQUIRE_FALSE(failed);
  CHECK(failed.error().parameter == "gateway");
  CHECK(failed.error().code == ErrorCode::unavailable);
}

TEST_CASE("gateway control: forged collectives and refused credentials are named",
          "[transport][cluster]") {
  auto server = *transport::ControlServer::start(server_options());
  auto wrong = link_options(server->port(), "gw-x");
  wrong.credential = "guess";
  auto refused = transport::ControlLink::connect(
      wrong,
      [](const v1::QueryStart&, ShardReducer&, const std::atomic<bool>&) -> Expected<std::string> {
        return std::string();
      });
  REQUIRE_FALSE(refused);
  CHECK(refused.error().parameter == "credential");
  CHECK(server->gateways().empty());

  // Two gateways whose sums differ in length cannot be steps of one engine: refused.
  std::vector<std::unique_ptr<transport::ControlLink>> links;
  for (std::size_t width : {1u, 2u})
    links.push_back(*transport::ControlLink::connect(
        link_options(server->port(), "gw-" + std::to_string(width)),
        [width](const v1::QueryStart&, ShardReducer& reducer,
                const std::atomic<bool>&) -> Expected<std::string> {
          std::vector<std::uint64_t> values(width, 1);
          reducer.sum(values);
          return std::string("done");
        }));
  REQUIRE(server->wait_for_gateways(2, 10s));
  auto forged = server->run_query("q-forged", "range", "", 10);
  REQUIRE_FALSE(forged);
  CHECK(forged.error().parameter == "collective");
  auto none = transport::ControlServer::start(server_options());
  REQUIRE(none);
  auto empty = (*none)->run_query("q-alone", "range", "", 10);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == ErrorCode::unavailable);
}

TEST_CASE("gateway control: a gateway that fails on its own ends the query at once, named",
          "[transport][cluster]") {
  auto server = *transport::ControlServer::start(server_options());  // deadline 60 s
  std::vector<std::unique_ptr<transport::ControlLink>> links;
  // gw-0 fails before its first collective (as a gateway of another version would); gw-1 waits
  // in that collective.
  links.push_back(*transport::ControlLink::connect(
      link_options(server->port(), "gw-0"),
      [](const v1::QueryStart&, ShardReducer&, const std::atomic<bool>&) -> Expected<std::string> {
        return make_error(ErrorCode::malformed_message, "spec", "spec: not understood");
      }));
  links.push_back(
      *transport::ControlLink::connect(link_options(server->port(), "gw-1"),
                                       [](const v1::QueryStart&, ShardReducer& reducer,
                                          const std::atomic<bool>&) -> Expected<std::string> {
                                         std::uint64_t none_failed = 0;
                                         reducer.sum(std::span(&none_failed, 1));
                                         return std::string("done");
                                       }));
  REQUIRE(server->wait_for_gateways(2, 10s));
  const auto start = std::chrono::steady_clock::now();
  auto failed = server->run_query("q-alone", "range", "", 10);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().parameter == "spec");
  CHECK(failed.error().message.find("gw-0") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 20s);  // not the 60 s deadline
  // A gateway attaching again under its id replaces its old stream.
  auto again = transport::ControlLink::connect(
      link_options(server->port(), "gw-1"),
      [](const v1::QueryStart&, ShardReducer&, const std::atomic<bool>&) -> Expected<std::string> {
        return std::string("done");
      });
  REQUIRE(again);
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (links[1]->connected() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(10ms);
  CHECK_FALSE(links[1]->connected());
  CHECK(server->gateways().size() == 2);
}

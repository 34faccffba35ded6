// Analyst queries over the live tier (cgp/transport/cluster_queries.hpp): the same devices (same
// seeds, fresh ledgers) answer one single-process coordinator and, again, three gateways that
// each hold the devices of their virtual shards and meet in a coordinator's ControlServer. Range
// (PM1), KDE (PM0), kNN, accuracy-first range and KDE, and Alg. 3's adaptive range give the same
// estimates, rounds, per-round counts and per-user charges, bit for bit.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include <grpcpp/grpcpp.h>
#include "cgp/protocol/virtual_shard.hpp"
#include "cgp/transport/cluster_queries.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/gateway.hpp"

#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/gateway_control.pb.h"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kClusterUsers = 36;
constexpr std::size_t kGateways = 3;
constexpr double kClusterBudget = 1.0;

v1::QueryOptions options(const std::string& id, const std::string& method, double rho) {
  v1::QueryOptions o;
  o.set_query_id(id);
  o.set_method(method);
  o.set_rounds(4);
  if (rho > 0)
    o.set_rho(rho);
  else
    o.set_adaptive(true);
  o.set_min_coverage(0);
  o.set_max_missing_share(1);
  return o;
}

// The queries, as an analyst sends them and as the coordinator forwards them to gateways.
std::vector<v1::ClusterQuery> queries() {
  std::vector<v1::ClusterQuery> out;
  v1::ClusterQuery range;
  *range.mutable_range()->mutable_options() = options("c-range", "PM1", 0.05);
  auto* box = range.mutable_range()->mutable_range()->mutable_box();
  for (double v : {200.0, 100.0}) box->add_lo(v);
  for (double v : {700.0, 800.0}) box->add_hi(v);
  out.push_back(range);
  v1::ClusterQuery density;
  *density.mutable_kde()->mutable_options() = options("c-kde", "PM0", 0.05);
  for (double v : {500.0, 500.0}) density.mutable_kde()->add_point(v);
  density.mutable_kde()->set_bandwidth(150);
  out.push_back(density);
  v1::ClusterQuery near;
  *near.mutable_knn()->mutable_options() = options("c-knn", "PM1", 0.05);
  for (double v : {400.0, 600.0}) near.mutable_knn()->add_point(v);
  near.mutable_knn()->set_k(5);
  out.push_back(near);
  v1::ClusterQuery certified = range;
  *certified.mutable_range()->mutable_options() = options("c-range-af", "PM1", 0.05);
  certified.mutable_range()->mutable_options()->set_rounds(0);
  certified.mutable_range()->mutable_accuracy()->set_relative(0.2);
  certified.mutable_range()->mutable_accuracy()->set_absolute(4);
  out.push_back(certified);
  v1::ClusterQuery certified_density = density;
  *certified_density.mutable_kde()->mutable_options() = options("c-kde-af", "PM0", 0.05);
  certified_density.mutable_kde()->mutable_options()->set_rounds(0);
  certified_density.mutable_kde()->mutable_accuracy()->set_absolute(0.05);
  out.push_back(certified_density);
  v1::ClusterQuery adaptive = range;
  *adaptive.mutable_range()->mutable_options() = options("c-adaptive", "PM1", 0);
  out.push_back(adaptive);
  for (auto& q : out) {
    const v1::QueryOptions& o = q.has_range() ? q.range().options()
                                : q.has_kde() ? q.kde().options()
                                              : q.knn().options();
    q.set_query_id(o.query_id());
    q.set_cap(o.rho());
    q.set_adaptive(o.adaptive());
    q.set_rho_capacity(kClusterBudget);
    q.set_adaptive_horizon(20);
  }
  // Alg. 3's query numbers count adaptive queries only: this is the first.
  out.back().set_adaptive_query(1);
  return out;
}

// A device's serving thread for devices[i] at `address`, ended by destruction.
struct ServedDevices {
  std::vector<client::Device> devices;
  std::vector<std::jthread> threads;
  ServedDevices(const std::vector<double>& points, std::uint64_t seed) {
    const auto config = *DeviceConfig::cgp(kClusterBudget);
    for (std::size_t i = 0; i < kClusterUsers; ++i) {
      devices.push_back(client::Device::open_for_simulation(config, seed, i));
      REQUIRE(devices.back().register_component("location", 2).ok());
      REQUIRE(devices.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
    }
  }
  void serve(std::size_t i, const std::string& address) {
    threads.emplace_back([this, i, address](std::stop_token stop) {
      link::DeviceConnection connection{address, "device-" + std::to_string(i), "",
                                        "",      std::chrono::milliseconds(0),  stop};
      while (!stop.stop_requested()) {
        (void)test::serve_simulated_device(connection, devices[i]);
        std::this_thread::sleep_for(20ms);
      }
    });
  }
};

// One gateway of the live tier: its devices on a DeviceGateway, its fleet, mirror and shard
// queries, and its control link.
struct TierGateway {
  std::vector<coordinator::UserId> ids;
  std::vector<std::string> device_ids;
  std::unique_ptr<transport::DeviceGateway> devices;
  std::unique_ptr<transport::NetworkFleet> fleet;
  std::unique_ptr<coordinator::BudgetMirror> mirror;
  std::unique_ptr<transport::ShardQueries> shard;
  std::unique_ptr<transport::ControlLink> link;
};

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

TEST_CASE("cluster queries: three gateways answer as the single-process coordinator does",
          "[transport][cluster]") {
  CGP_SEEDED(30);
  const auto points = test::uniform_square(kClusterUsers, 1000, seed);
  const auto asked = queries();

  // The single process: every device on one coordinator, asked over its Analyst API.
  std::vector<v1::QueryResult> expected;
  {
    transport::CoordinatorOptions options;
    options.gateway.address = "127.0.0.1:0";
    options.device_ids = test::device_ids(kClusterUsers);
    options.device_budget = kClusterBudget;
    options.round_deadline = 20s;
    auto service = *transport::CoordinatorService::start(options);
    const std::string address = "127.0.0.1:" + std::to_string(service->port());
    ServedDevices served(points, seed);
    for (std::size_t i = 0; i < kClusterUsers; ++i) served.serve(i, address);
    REQUIRE(service->gateway().wait_for_devices(kClusterUsers, 30s));
    auto stub =
        v1::Analyst::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    for (const auto& q : asked) {
      grpc::ClientContext context;
      v1::QueryResult result;
      grpc::Status status = q.has_range() ? stub->RangeCount(&context, q.range(), &result)
                            : q.has_kde() ? stub->Kde(&context, q.kde(), &result)
                                          : stub->Knn(&context, q.knn(), &result);
      INFO(q.query_id() << ": " << status.error_message());
      REQUIRE(status.ok());
      expected.push_back(result);
    }
  }

  // The tier: devices split over three gateways by their virtual shard.
  auto server = *transport::ControlServer::start([] {
    transport::ControlServerOptions o;
    o.authenticate = [](const std::string&, const std::string& credential) {
      return credential == "gateway-secret";
    };
    return o;
  }());
  std::vector<TierGateway> gateways(kGateways);
  for (std::size_t i = 0; i < kClusterUsers; ++i) {
    const std::string id = "device-" + std::to_string(i);
    auto& gateway =
        gateways[protocol::virtual_shard(id, protocol::kDefaultVirtualShards) % kGateways];
    gateway.ids.push_back(static_cast<coordinator::UserId>(i));
    gateway.device_ids.push_back(id);
  }
  ServedDevices served(points, seed);
  for (std::size_t g = 0; g < kGateways; ++g) {
    auto& gateway = gateways[g];
    INFO("gateway " << g << " holds " << gateway.ids.size() << " users");
    REQUIRE(gateway.ids.size() > 0);
    gateway.devices = *transport::DeviceGateway::start("127.0.0.1:0");
    const std::string address = "127.0.0.1:" + std::to_string(gateway.devices->port());
    for (auto u : gateway.ids) served.serve(u, address);
    REQUIRE(gateway.devices->wait_for_devices(gateway.ids.size(), 30s));
    gateway.fleet = std::make_unique<transport::NetworkFleet>(*gateway.devices, gateway.device_ids,
                                                              2, kClusterBudget, 20s);
    gateway.mirror =
        std::make_unique<coordinator::BudgetMirror>(gateway.ids.size(), kClusterBudget);
    gateway.shard = std::make_unique<transport::ShardQueries>(
        *gateway.fleet, *gateway.mirror, gateway.ids, std::vector<char>{},
        [](coordinator::UserId u) { return "device-" + std::to_string(u); });
    transport::ControlLinkOptions link;
    link.coordinator_address = "127.0.0.1:" + std::to_string(server->port());
    link.gateway_id = "gw-" + std::to_string(g);
    link.credential = "gateway-secret";
    auto* shard = gateway.shard.get();
    gateway.link = *transport::ControlLink::connect(
        link,
        [shard](const v1::QueryStart& start, coordinator::ShardReducer& reducer,
                const std::atomic<bool>& aborted) { return shard->run(start, reducer, aborted); });
  }
  REQUIRE(server->wait_for_gateways(kGateways, 10s));

  for (std::size_t q = 0; q < asked.size(); ++q) {
    INFO(asked[q].query_id());
    auto result = transport::run_cluster_query(*server, asked[q], kClusterUsers);
    REQUIRE(result);
    const v1::QueryResult& want = expected[q];
    CHECK(same_bits(result->estimate(), want.estimate()));
    CHECK(same_bits(result->lower(), want.lower()));
    CHECK(same_bits(result->upper(), want.upper()));
    CHECK(result->certified() == want.certified());
    CHECK(result->rounds_used() == want.rounds_used());
    CHECK(std::vector<std::uint64_t>(result->asked_per_round().begin(),
                                     result->asked_per_round().end()) ==
          std::vector<std::uint64_t>(want.asked_per_round().begin(), want.asked_per_round().end()));
    CHECK(std::vector<std::uint64_t>(result->eliminated_per_round().begin(),
                                     result->eliminated_per_round().end()) ==
          std::vector<std::uint64_t>(want.eliminated_per_round().begin(),
                                     want.eliminated_per_round().end()));
    CHECK(std::vector<std::uint32_t>(result->neighbour_users().begin(),
                                     result->neighbour_users().end()) ==
          std::vector<std::uint32_t>(want.neighbour_users().begin(), want.neighbour_users().end()));
    std::map<std::uint32_t, double> got_charges, want_charges;
    for (const auto& c : result->charges()) got_charges[c.user()] = c.rho();
    for (const auto& c : want.charges()) want_charges[c.user()] = c.rho();
    CHECK_FALSE(want_charges.empty());  // the comparison is over users who were charged
    CHECK(got_charges == want_charges);
    CHECK(result->unanswered_size() == want.unanswered_size());
    CHECK(result->refused_size() == want.refused_size());
    CHECK(result->coverage().answered() == want.coverage().answered());
    CHECK(result->coverage().users() == want.coverage().users());
    CHECK(same_bits(result->missing().upper(), want.missing().upper()));
  }
}

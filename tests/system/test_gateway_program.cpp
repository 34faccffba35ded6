// cgp-gateway as an operator runs it (tools/gateway_node.hpp, docs/cluster.md): two gateway
// processes over a PostgreSQL server of the test's own take their leases, load the devices of
// their shards, attach to a coordinator's control port and answer queries together; their
// shards' mirror is in PostgreSQL after each query. A gateway killed mid-query makes the query
// fail by name; started again, it reloads its shards' mirror (never above what devices spent)
// and the next query runs on every device. Once a new leader took the cluster, the old
// coordinator's queries reach no device (gateways check the epoch against PostgreSQL).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/mirror_blob.hpp"
#include "cgp/cluster/postgres.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "cgp/transport/cluster_queries.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/v1/gateway_control.pb.h"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/scratch_postgres.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kShards = 64;
constexpr std::size_t kDevices = 12;

std::uint32_t shard_of(std::size_t i) {
  return protocol::virtual_shard("device-" + std::to_string(i), kShards);
}

v1::ClusterQuery range_query(const std::string& id, double rho) {
  v1::ClusterQuery q;
  auto* range = q.mutable_range();
  range->mutable_options()->set_query_id(id);
  range->mutable_options()->set_method("BM0");
  range->mutable_options()->set_rho(rho);
  auto* box = range->mutable_range()->mutable_box();
  for (double v : {0.0, 0.0}) box->add_lo(v);
  for (double v : {600.0, 600.0}) box->add_hi(v);
  q.set_query_id(id);
  q.set_cap(rho);
  q.set_rho_capacity(1.0);
  return q;
}

class GatewayProcess {
 public:
  GatewayProcess(std::vector<std::string> args) : pid_(test::spawn_program(args)) {}
  ~GatewayProcess() { kill(SIGKILL); }
  void kill(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_;
};

}  // namespace

TEST_CASE("gateway program: two cgp-gateway processes answer together and recover their mirror",
          "[transport][cluster][exec]") {
  CGP_SEEDED(30);
  test::ScratchPostgres postgres;
  const test::ThrowawayCertificate tls;
  const auto folder = std::filesystem::path(postgres.folder()) / "files";
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "cert.pem") << tls.certificate;
  std::ofstream(folder / "key.pem") << tls.key;

  auto store = *cluster::ClusterStore::open(postgres.conninfo());
  REQUIRE(store->initialize({kShards, 1.0}));
  std::vector<std::pair<std::string, cluster::Sha256>> devices;
  for (std::size_t i = 0; i < kDevices; ++i)
    devices.push_back(
        {"device-" + std::to_string(i), transport::sha256_of("key-" + std::to_string(i))});
  REQUIRE(store->enrol_all(devices));
  std::vector<std::pair<std::uint32_t, std::string>> owners;
  for (int g = 0; g < 2; ++g) {
    REQUIRE(store->register_gateway("gw-" + std::to_string(g),
                                    transport::sha256_of("secret-" + std::to_string(g))));
    std::ofstream(folder / ("gw-" + std::to_string(g) + ".secret")) << "secret-" << g << "\n";
  }
  for (std::uint32_t s = 0; s < kShards; ++s) owners.push_back({s, "gw-" + std::to_string(s % 2)});
  const std::int64_t epoch = **store->try_lead();  // the coordinator's lease, as a leader has it
  REQUIRE(store->assign_shards(epoch, owners));

  std::mutex store_mutex;
  transport::ControlServerOptions control;
  control.authenticate = [&](const std::string& id, const std::string& secret) {
    std::lock_guard lock(store_mutex);
    auto digest = store->gateway_credential(id);
    return digest && digest->has_value() && transport::credential_matches(secret, **digest);
  };
  control.query_deadline = 60s;
  control.coordinator_epoch = epoch;  // the leader's: gateways run its queries only
  auto server = *transport::ControlServer::start(control);

  int ports[2] = {test::free_port(), test::free_port()};
  const auto gateway_args = [&](int g) {
    return std::vector<std::string>{CGP_GATEWAY_PATH,
                                    "--cluster",
                                    postgres.conninfo(),
                                    "--id",
                                    "gw-" + std::to_string(g),
                                    "--credential",
                                    (folder / ("gw-" + std::to_string(g) + ".secret")).string(),
                                    "--coordinator",
                                    "127.0.0.1:" + std::to_string(server->port()),
                                    "--listen",
                                    "127.0.0.1:" + std::to_string(ports[g]),
                                    "--tls-cert",
                                    (folder / "cert.pem").string(),
                                    "--tls-key",
                                    (folder / "key.pem").string(),
                                    "--lease-ttl-ms",
                                    "3000",
                                    "--round-deadline-ms",
                                    "5000"};
  };
  std::unique_ptr<GatewayProcess> processes[2];
  for (int g = 0; g < 2; ++g) processes[g] = std::make_unique<GatewayProcess>(gateway_args(g));
  REQUIRE(server->wait_for_gateways(2, 30s));

  const auto points = test::uniform_square(kDevices, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  std::vector<client::Device> phones;
  for (std::size_t i = 0; i < kDevices; ++i) {
    phones.push_back(client::Device::open_for_simulation(config, seed, i));
    REQUIRE(phones.back().register_component("location", 2).ok());
    REQUIRE(phones.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
  }
  std::vector<std::jthread> serving;
  for (std::size_t i = 0; i < kDevices; ++i)
    serving.emplace_back([&, i](std::stop_token stop) {
      link::DeviceConnection c;
      c.coordinator_address = "127.0.0.1:" + std::to_string(ports[shard_of(i) % 2]);
      c.device_id = "device-" + std::to_string(i);
      c.credential = "key-" + std::to_string(i);
      c.tls_root_certificate = tls.certificate;
      c.allow_simulation_randomness = true;
      c.stop = stop;
      (void)link::serve_device_reconnecting(c, phones[i], {100ms, 500ms, 5s});
    });

  // Until every device answers (each try charges its answers: a small ρ).
  const auto everyone_answers = [&](const std::string& prefix) {
    for (int attempt = 0; attempt < 40; ++attempt) {
      auto result = transport::run_cluster_query(
          *server, range_query(prefix + std::to_string(attempt), 1e-3), kDevices);
      if (result && result->coverage().answered() == kDevices) return true;
      std::this_thread::sleep_for(250ms);
    }
    return false;
  };
  REQUIRE(everyone_answers("warm-"));
  auto first = transport::run_cluster_query(*server, range_query("q-1", 0.2), kDevices);
  REQUIRE(first);
  CHECK(first->coverage().answered() == kDevices);
  CHECK(first->charges_size() == static_cast<int>(kDevices));

  // Each shard's mirror is in PostgreSQL, as of q-1, at or below what each device has left.
  std::vector<std::uint32_t> all(kShards);
  for (std::uint32_t s = 0; s < kShards; ++s) all[s] = s;
  auto snapshots = store->snapshots(all);
  REQUIRE(snapshots);
  std::size_t mirrored = 0;
  for (const auto& snapshot : *snapshots) {
    CHECK(snapshot.as_of_query == "q-1");
    const auto entries = cluster::decode_mirror_blob(snapshot.blob);
    REQUIRE(entries);
    for (const cluster::MirrorEntry& entry : *entries) {
      ++mirrored;
      CHECK(entry.remaining <= phones[entry.user_index].remaining() + 1e-12);
      CHECK(entry.remaining < 1.0 - 0.2 + 1e-9);
    }
  }
  CHECK(mirrored == kDevices);

  // gw-1 dies in mid-query: the query fails naming the gateway; nothing is merged.
  std::jthread killer([&] {
    std::this_thread::sleep_for(50ms);
    processes[1]->kill(SIGKILL);
  });
  v1::ClusterQuery slow = range_query("q-killed", 0.05);
  slow.mutable_range()->mutable_options()->set_method("PM1");
  slow.mutable_range()->mutable_options()->set_rounds(16);
  auto killed = transport::run_cluster_query(*server, slow, kDevices);
  killer.join();
  if (!killed) {
    CHECK(killed.error().parameter == "gateway");
  } else {
    WARN("the query finished before the gateway died");
  }
  // Started again, gw-1 reloads its shards (and their mirror) and the fleet answers together.
  processes[1] = std::make_unique<GatewayProcess>(gateway_args(1));
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (server->gateways().size() < 2 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(50ms);
  REQUIRE(server->gateways().size() == 2);
  REQUIRE(everyone_answers("again-"));

  // A new leader takes over (the epoch rises): this coordinator's next query reaches no device.
  auto standby = *cluster::ClusterStore::open(postgres.conninfo());
  {
    std::lock_guard lock(store_mutex);
    REQUIRE(store->connection().run("SELECT pg_advisory_unlock_all()"));
  }
  auto taken = standby->try_lead();
  REQUIRE(taken);
  REQUIRE(taken->has_value());
  const double spent_before = phones[0].spent();
  auto deposed = transport::run_cluster_query(*server, range_query("q-deposed", 0.05), kDevices);
  REQUIRE_FALSE(deposed);
  CHECK(deposed.error().parameter == "epoch");
  CHECK(phones[0].spent() == spent_before);
  for (auto& t : serving) t.request_stop();
}

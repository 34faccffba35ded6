// The live tier as an operator runs it (docs/cluster.md): PostgreSQL, HAProxy, a
// `cgp-coordinator cluster` and its standby, three `cgp-gateway` processes — every one a process
// of its own, kept running as systemd would — and devices that dial their shard's name through
// HAProxy. The leader gives the shards out and routes HAProxy; its queries equal the
// single-process coordinator's bit for bit. Killed in mid-query, its standby takes the lead:
// the analyst gets a result or a named abort, the gateways follow the new leader, the devices
// come back through HAProxy, the mirror is never above a device's ledger and the next query
// runs on every device.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/haproxy.hpp"
#include "cgp/cluster/mirror_blob.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/scratch_postgres.hpp"
#include "support/seed.hpp"
#include "support/supervised_program.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kProgramShards = 64;
constexpr std::size_t kProgramDevices = 12, kProgramGateways = 3;
constexpr double kProgramBudget = 1.0;
const std::string kTemplate = "s{shard}.devices.test:443";
const std::string kAnalystSecret = "analyst-secret";

v1::RangeCountQuery range_query(const std::string& id, double rho, const char* method,
                                std::uint32_t rounds) {
  v1::RangeCountQuery q;
  q.mutable_options()->set_query_id(id);
  q.mutable_options()->set_method(method);
  q.mutable_options()->set_rho(rho);
  if (rounds > 0) q.mutable_options()->set_rounds(rounds);
  auto* box = q.mutable_range()->mutable_box();
  for (double v : {0.0, 0.0}) box->add_lo(v);
  for (double v : {600.0, 600.0}) box->add_hi(v);
  return q;
}

v1::KnnQuery knn_query(const std::string& id) {
  v1::KnnQuery q;
  q.mutable_options()->set_query_id(id);
  q.mutable_options()->set_rho(0.1);
  for (double v : {500.0, 500.0}) q.add_point(v);
  q.set_k(3);
  return q;
}

// An analyst's calls to a coordinator's Analyst port.
struct AnalystClient {
  std::unique_ptr<v1::Analyst::Stub> stub;
  explicit AnalystClient(const std::string& address)
      : stub(v1::Analyst::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}
  template <class Call, class Request>
  grpc::Status call(Call method, const Request& request, v1::QueryResult& out,
                    std::chrono::seconds timeout = 60s) {
    grpc::ClientContext context;
    context.AddMetadata("cgp-analyst-credential", kAnalystSecret);
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    return ((*stub).*method)(&context, request, &out);
  }
  grpc::Status range(const v1::RangeCountQuery& q, v1::QueryResult& out) {
    return call(&v1::Analyst::Stub::RangeCount, q, out);
  }
  grpc::Status result(const std::string& id, v1::QueryResult& out) {
    v1::ResultRequest request;
    request.set_query_id(id);
    return call(&v1::Analyst::Stub::GetResult, request, out, 10s);
  }
};

// A slow query (PM1, 16 rounds) to `address`, with `strike` done 100 ms after it left: what the
// analyst got.
grpc::Status query_struck_midway(const std::string& address, const std::string& id,
                                 const std::function<void()>& strike) {
  grpc::Status status;
  std::jthread asking([&] {
    AnalystClient mine(address);
    v1::QueryResult out;
    status = mine.range(range_query(id, 0.05, "PM1", 16), out);
  });
  std::this_thread::sleep_for(100ms);
  strike();
  asking.join();
  return status;
}

// Device connections HAProxy holds open to the gateways now ("show stat": each backend's scur).
std::size_t haproxy_sessions(const std::string& admin_socket) {
  const auto stat = cluster::haproxy_command(admin_socket, "show stat");
  if (!stat) return 0;
  std::size_t total = 0;
  std::istringstream lines(*stat);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) fields.push_back(cell);
    if (fields.size() > 4 && fields[1] == "BACKEND" && !fields[4].empty())
      total += std::stoul(fields[4]);
  }
  return total;
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The devices' phones, each serving from its own thread until the set is destroyed.
struct Phones {
  std::vector<client::Device> devices;
  std::vector<std::jthread> threads;
  static constexpr std::size_t kMostDevices =
      kProgramDevices + 4;  // room for enrolments (no realloc)
  Phones(const std::vector<double>& points, std::uint64_t seed) {
    devices.reserve(kMostDevices);
    for (std::size_t i = 0; i < kProgramDevices; ++i) add(points, seed);
  }
  // The next device, at the next point of `points`.
  void add(const std::vector<double>& points, std::uint64_t seed) {
    REQUIRE(devices.size() < kMostDevices);
    const std::size_t i = devices.size();
    devices.push_back(
        client::Device::open_for_simulation(*DeviceConfig::cgp(kProgramBudget), seed, i));
    REQUIRE(devices.back().register_component("location", 2).ok());
    REQUIRE(devices.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
  }
  void serve(std::size_t i, link::DeviceConnection connection) {
    threads.emplace_back([this, i, connection](std::stop_token stop) mutable {
      connection.stop = stop;
      connection.allow_simulation_randomness = true;
      (void)link::serve_device_reconnecting(connection, devices[i], {50ms, 500ms, 5s});
    });
  }
};

// A whole live tier of processes on loopback: PostgreSQL, HAProxy, two coordinators (a leader
// and its standby), three gateways, each kept running as systemd would; `phones` dial their
// shard's name through HAProxy.
struct LiveTier {
  test::ScratchPostgres postgres;
  std::filesystem::path folder;
  test::ThrowawayCertificate tls{"DNS:*.devices.test"};
  std::unique_ptr<cluster::ClusterStore> store;
  cluster::HaproxySettings haproxy;
  int device_port = 0;
  std::vector<int> gateway_ports;
  std::unique_ptr<test::SupervisedProgram> balancer;
  std::unique_ptr<test::SupervisedProgram> coordinators[2];
  std::vector<std::unique_ptr<test::SupervisedProgram>> gateways;
  std::unique_ptr<Phones> phones;

  // How long a gateway serves before it restarts to take in devices enrolled on its shards.
  std::string enrolment_reload_ms;
  // GET /metrics of the leader (whichever coordinator leads) and of each gateway.
  int coordinator_metrics_port = test::free_port();
  std::vector<int> gateway_metrics_ports;

  LiveTier(const std::vector<double>& points, std::uint64_t seed,
           std::chrono::milliseconds enrolment_reload = 60s)
      : enrolment_reload_ms(std::to_string(enrolment_reload.count())) {
    folder = std::filesystem::path(postgres.folder()) / "files";
    std::filesystem::create_directories(folder);
    std::ofstream(folder / "cert.pem") << tls.certificate;
    std::ofstream(folder / "key.pem") << tls.key;
    std::ofstream(folder / "analyst.key") << kAnalystSecret << "\n";
    store = *cluster::ClusterStore::open(postgres.conninfo());
    REQUIRE(store->initialize({kProgramShards, kProgramBudget}));
    std::vector<std::pair<std::string, cluster::Sha256>> enrolment;
    for (std::size_t i = 0; i < kProgramDevices; ++i)
      enrolment.push_back(
          {"device-" + std::to_string(i), transport::sha256_of("key-" + std::to_string(i))});
    REQUIRE(store->enrol_all(enrolment));
    std::vector<cluster::HaproxyGateway> backends;
    for (std::size_t g = 0; g < kProgramGateways; ++g) {
      const std::string id = "gw-" + std::to_string(g);
      REQUIRE(store->register_gateway(id, transport::sha256_of("secret-" + id)));
      std::ofstream(folder / (id + ".key")) << "secret-" << id << "\n";
      gateway_ports.push_back(test::free_port());
      gateway_metrics_ports.push_back(test::free_port());
      backends.push_back({id, "127.0.0.1:" + std::to_string(gateway_ports.back()), ""});
    }
    // HAProxy, with no shard routed yet: the leader routes them as it gives them out.
    device_port = test::free_port();
    haproxy.grpc_listen = "127.0.0.1:" + std::to_string(device_port);
    haproxy.admin_socket = (folder / "admin.sock").string();
    haproxy.map_path = (folder / "shards.map").string();
    haproxy.address_template = kTemplate;
    haproxy.max_connections = 1000;
    std::ofstream(haproxy.map_path) << "";
    std::ofstream(folder / "haproxy.cfg") << *cluster::haproxy_config(haproxy, backends);
    balancer = std::make_unique<test::SupervisedProgram>(std::vector<std::string>{
        CGP_HAPROXY_PATH, "-f", (folder / "haproxy.cfg").string(), "-db", "-q"});
    // A leader and its standby, then the gateways (which dial whoever leads).
    coordinators[0] = std::make_unique<test::SupervisedProgram>(coordinator_args(), log_of(0));
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    while (store->leader()->control_address.empty() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(50ms);
    REQUIRE_FALSE(store->leader()->control_address.empty());
    coordinators[1] = std::make_unique<test::SupervisedProgram>(coordinator_args(), log_of(1));
    for (std::size_t g = 0; g < kProgramGateways; ++g)
      gateways.push_back(std::make_unique<test::SupervisedProgram>(gateway_args(g)));
    // The devices dial their shard's name through HAProxy.
    phones = std::make_unique<Phones>(points, seed);
    for (std::size_t i = 0; i < kProgramDevices; ++i) serve_phone(i);
  }
  // Device i dials its shard's name through HAProxy.
  void serve_phone(std::size_t i) {
    phones->serve(i,
                  test::shard_device_connection(device_port, i, kProgramShards, tls.certificate));
  }
  ~LiveTier() { phones.reset(); }  // the devices stop before the processes they dial

  // Coordinators take any free ports and announce them in the cluster.
  std::vector<std::string> coordinator_args() const {
    return {CGP_COORDINATOR_PATH,
            "cluster",
            "--cluster",
            postgres.conninfo(),
            "--analyst-credential",
            (folder / "analyst.key").string(),
            "--control-listen",
            "127.0.0.1:0",
            "--analyst-listen",
            "127.0.0.1:0",
            "--min-gateways",
            std::to_string(kProgramGateways),
            "--poll-ms",
            "200",
            "--haproxy-socket",
            haproxy.admin_socket,
            "--haproxy-map",
            haproxy.map_path,
            "--address-template",
            kTemplate,
            "--metrics-listen",
            "127.0.0.1:" + std::to_string(coordinator_metrics_port)};
  }
  std::vector<std::string> gateway_args(std::size_t g) const {
    const std::string id = "gw-" + std::to_string(g);
    return {CGP_GATEWAY_PATH,
            "--cluster",
            postgres.conninfo(),
            "--id",
            id,
            "--credential",
            (folder / (id + ".key")).string(),
            "--listen",
            "127.0.0.1:" + std::to_string(gateway_ports[g]),
            "--tls-cert",
            (folder / "cert.pem").string(),
            "--tls-key",
            (folder / "key.pem").string(),
            "--lease-ttl-ms",
            "2000",
            "--round-deadline-ms",
            "30000",  // a loaded machine's devices are slow, not gone
            "--enrolment-reload-ms",
            enrolment_reload_ms,
            "--metrics-listen",
            "127.0.0.1:" + std::to_string(gateway_metrics_ports[g])};
  }

  std::string log_of(int c) const {
    return (folder / ("coordinator-" + std::to_string(c) + ".log")).string();
  }

  // The leader's Analyst API, as it announced it in the cluster, once it answers there ("" after
  // a minute without one).
  std::string leader_address() const {
    const auto ends = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < ends) {
      const auto leader = store->leader();
      if (leader && !leader->analyst_address.empty()) {
        AnalystClient probe(leader->analyst_address);
        v1::QueryResult ignored;
        if (probe.result("no-such-query", ignored).error_code() == grpc::StatusCode::NOT_FOUND)
          return leader->analyst_address;
      }
      std::this_thread::sleep_for(100ms);
    }
    return {};
  }
  // Which of the two coordinator processes leads now: the one whose log says it serves there.
  int leader_process() const {
    const std::string address = leader_address();
    if (address.empty()) return -1;
    for (int c = 0; c < 2; ++c) {
      std::ifstream log(log_of(c));
      const std::string text((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
      const auto serving = text.rfind("event=cluster-coordinator-serving");
      if (serving != std::string::npos &&
          text.find("analyst=" + address, serving) != std::string::npos)
        return c;
    }
    return -1;
  }

  // Until a query through the leader reaches every device (each try charges a small ρ).
  bool everyone_answers(const std::string& prefix, std::size_t devices = kProgramDevices) const {
    std::string last;
    for (int attempt = 0; attempt < 240; ++attempt) {
      const std::string leader = leader_address();
      if (leader.empty()) return false;
      AnalystClient analyst(leader);
      v1::QueryResult result;
      const auto status =
          analyst.range(range_query(prefix + std::to_string(attempt), 1e-3, "BM0", 0), result);
      if (status.ok() && result.coverage().answered() == devices) return true;
      last = status.error_message();
      std::this_thread::sleep_for(250ms);
    }
    FAIL_CHECK("the fleet never answered whole: " << last);
    return false;
  }

  // No shard's mirror in PostgreSQL is above what its devices have left; how many users the
  // snapshots hold.
  std::size_t check_mirror_below_ledgers() const {
    std::vector<std::uint32_t> all(kProgramShards);
    for (std::uint32_t s = 0; s < kProgramShards; ++s) all[s] = s;
    auto snapshots = store->snapshots(all);
    // The test's own connection may have been cut by a server restart: dialled again.
    for (int attempt = 0; !snapshots && attempt < 20; ++attempt) {
      std::this_thread::sleep_for(250ms);
      snapshots = store->snapshots(all);
    }
    REQUIRE(snapshots);
    std::size_t mirrored = 0;
    for (const auto& snapshot : *snapshots) {
      const auto entries = cluster::decode_mirror_blob(snapshot.blob);
      REQUIRE(entries);
      for (const auto& entry : *entries) {
        ++mirrored;
        CHECK(entry.remaining <= phones->devices[entry.user_index].remaining() + 1e-12);
      }
    }
    return mirrored;
  }
};

}  // namespace

TEST_CASE(
    "cluster program: through HAProxy three gateways answer as the single process and a standby "
    "takes over a killed leader",
    "[transport][cluster][exec]") {
  CGP_SEEDED(31);
  const auto points = test::uniform_square(kProgramDevices, 1000, seed);

  // The single process first: the same devices (same seeds) on one coordinator.
  const std::vector<v1::RangeCountQuery> ranges{range_query("q-pm1", 0.2, "PM1", 4),
                                                range_query("q-bm0", 0.1, "BM0", 0)};
  std::vector<v1::QueryResult> expected;
  v1::QueryResult expected_knn;
  {
    transport::CoordinatorOptions options;
    options.gateway.address = "127.0.0.1:0";
    options.device_ids = test::device_ids(kProgramDevices);
    options.device_budget = kProgramBudget;
    options.round_deadline = 20s;
    auto service = *transport::CoordinatorService::start(options);
    Phones phones(points, seed);
    for (std::size_t i = 0; i < kProgramDevices; ++i)
      phones.serve(i, {"127.0.0.1:" + std::to_string(service->port()),
                       "device-" + std::to_string(i),
                       "",
                       "",
                       0ms,
                       {}});
    REQUIRE(service->gateway().wait_for_devices(kProgramDevices, 30s));
    auto stub = v1::Analyst::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(service->port()), grpc::InsecureChannelCredentials()));
    for (const auto& q : ranges) {
      grpc::ClientContext context;
      v1::QueryResult result;
      REQUIRE(stub->RangeCount(&context, q, &result).ok());
      expected.push_back(result);
    }
    grpc::ClientContext context;
    REQUIRE(stub->Knn(&context, knn_query("q-knn"), &expected_knn).ok());
  }

  LiveTier tier(points, seed);
  // Every device's noise comes from its own seeded stream, in the order it answers: to compare
  // with the single process, no query may reach part of the fleet first. So the first query
  // waits until every shard has its owner, every gateway owns some (a gateway that joins late
  // takes shards from the others, which restart and drop their devices: CI once saw that
  // after a second of a whole but unbalanced tier), and HAProxy has held all the devices'
  // connections for a second (a device of a shard not yet served is told to come back, and
  // answers nothing).
  const auto settled_by = std::chrono::steady_clock::now() + 90s;
  auto steady_since = std::chrono::steady_clock::now();
  bool settled = false;
  while (!settled && std::chrono::steady_clock::now() < settled_by) {
    const auto owners = tier.store->shard_owners();
    std::set<std::string> owning;
    if (owners)
      for (const auto& owner : *owners) owning.insert(owner.gateway_id);
    const bool whole = owners && owners->size() == kProgramShards &&
                       owning.size() == kProgramGateways &&
                       haproxy_sessions(tier.haproxy.admin_socket) == kProgramDevices;
    if (!whole) steady_since = std::chrono::steady_clock::now();
    settled = whole && std::chrono::steady_clock::now() - steady_since > 1s;
    std::this_thread::sleep_for(50ms);
  }
  INFO("HAProxy holds " << haproxy_sessions(tier.haproxy.admin_socket) << " device connections");
  REQUIRE(settled);

  const int first_leader = tier.leader_process();
  REQUIRE(first_leader >= 0);
  const std::string first_address = tier.leader_address();
  AnalystClient analyst(first_address);
  for (std::size_t q = 0; q < ranges.size(); ++q) {
    v1::QueryResult got;
    // Refused while a gateway is not attached with its shards (nothing sent): asked again.
    auto status = analyst.range(ranges[q], got);
    for (int retry = 0; retry < 100 && status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                        status.error_message().find("shards") != std::string::npos;
         ++retry) {
      std::this_thread::sleep_for(100ms);
      status = analyst.range(ranges[q], got);
    }
    INFO(ranges[q].options().query_id() << ": " << status.error_message());
    REQUIRE(status.ok());
    CHECK(same_bits(got.estimate(), expected[q].estimate()));
    CHECK(got.rounds_used() == expected[q].rounds_used());
    CHECK(got.coverage().answered() == expected[q].coverage().answered());
    REQUIRE(got.charges_size() == expected[q].charges_size());
    for (int c = 0; c < got.charges_size(); ++c) {
      CHECK(got.charges(c).user() == expected[q].charges(c).user());
      CHECK(same_bits(got.charges(c).rho(), expected[q].charges(c).rho()));
    }
    // The result is in PostgreSQL: GetResult gives it back.
    v1::QueryResult kept;
    REQUIRE(analyst.result(ranges[q].options().query_id(), kept).ok());
    CHECK(same_bits(kept.estimate(), got.estimate()));
  }
  {
    v1::QueryResult got;
    REQUIRE(analyst.call(&v1::Analyst::Stub::Knn, knn_query("q-knn"), got).ok());
    CHECK(std::vector<std::string>(got.neighbours().begin(), got.neighbours().end()) ==
          std::vector<std::string>(expected_knn.neighbours().begin(),
                                   expected_knn.neighbours().end()));
  }
  // Prometheus: the leader counts its queries, every gateway its devices and their replies.
  const std::string driver = test::http_get(tier.coordinator_metrics_port, "/metrics");
  INFO(driver);
  CHECK(driver.find("cgp_queries_total{kind=\"range\",outcome=\"valid\"} " +
                    std::to_string(ranges.size())) != std::string::npos);
  CHECK(driver.find("cgp_devices_connected") == std::string::npos);  // it holds no device
  std::size_t connected = 0;
  for (int port : tier.gateway_metrics_ports) {
    const std::string gateway = test::http_get(port, "/metrics");
    INFO(gateway);
    CHECK(gateway.find("cgp_replies_total ") != std::string::npos);
    const std::string key = "\ncgp_devices_connected ";
    const auto at = gateway.find(key);
    REQUIRE(at != std::string::npos);
    connected += std::stoul(gateway.substr(at + key.size()));
  }
  CHECK(connected == kProgramDevices);

  // The leader dies in mid-query: the standby takes the lead.
  const grpc::Status cut_status = query_struck_midway(
      first_address, "q-cut", [&] { tier.coordinators[first_leader]->signal(SIGKILL); });
  // Whoever leads now (the standby, or the killed leader started again) answers where it
  // announced itself; the dead leader's address answers nothing.
  const std::string now_leading = tier.leader_address();
  REQUIRE_FALSE(now_leading.empty());
  // q-cut: its result, or a named abort — never a silent wrong answer.
  AnalystClient next(now_leading);
  v1::QueryResult after_cut;
  const auto cut_kept = next.result("q-cut", after_cut);
  INFO("q-cut on the old leader: " << cut_status.error_message()
                                   << "; on the new: " << cut_kept.error_message());
  if (cut_status.ok()) {
    CHECK(cut_kept.ok());
  } else if (cut_kept.ok()) {
    CHECK(after_cut.coverage().answered() > 0);  // it finished before the leader died
  } else {
    // Aborted by the new leader, named; or never begun (the leader died before its intent).
    const auto code = cut_kept.error_code();
    CHECK((code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::NOT_FOUND));
    CHECK((cut_kept.error_message().find("coordinator") != std::string::npos ||
           cut_kept.error_message().find("no query") != std::string::npos));
  }

  // The gateways follow the new leader, the devices come back: the next query asks everyone.
  REQUIRE(tier.everyone_answers("again-"));
  CHECK(tier.check_mirror_below_ledgers() == kProgramDevices);
}

TEST_CASE(
    "cluster program: a gateway killed in mid-query leaves a degraded result naming its shards "
    "and its shards move to the survivors through HAProxy",
    "[transport][cluster][exec]") {
  CGP_SEEDED(32);
  LiveTier tier(test::uniform_square(kProgramDevices, 1000, seed), seed);
  REQUIRE(tier.everyone_answers("warm-"));
  const std::string leader = tier.leader_address();
  REQUIRE_FALSE(leader.empty());
  // The victim is gw-1, or the first gateway that owns shards where gw-1 owns none (a lease
  // that lapsed while the machine was loaded moves a gateway's shards to the others: seen under
  // the sanitizers with four tests at once). Its shards and the users enrolled on them, before
  // it dies.
  const auto owned = tier.store->shard_owners();
  REQUIRE(owned);
  const auto owns_shards = [&](std::size_t g) {
    return std::any_of(owned->begin(), owned->end(), [&](const auto& owner) {
      return owner.gateway_id == "gw-" + std::to_string(g);
    });
  };
  std::size_t victim = 1;
  if (!owns_shards(victim))
    for (std::size_t g = 0; g < kProgramGateways; ++g)
      if (owns_shards(g)) {
        victim = g;
        break;
      }
  const std::string victim_id = "gw-" + std::to_string(victim);
  INFO("victim " << victim_id);
  std::vector<std::uint32_t> lost_shards;
  for (const auto& owner : *owned)
    if (owner.gateway_id == victim_id) lost_shards.push_back(owner.shard);
  std::sort(lost_shards.begin(), lost_shards.end());
  REQUIRE_FALSE(lost_shards.empty());
  std::vector<std::uint32_t> lost_users;
  const auto enrolled = tier.store->enrolled_in(lost_shards);
  REQUIRE(enrolled);
  for (const auto& user : *enrolled)
    lost_users.push_back(static_cast<std::uint32_t>(user.user_index));
  CHECK_FALSE(lost_users.empty());  // some device is on the victim: the test means something
  // The victim is frozen first (its stream stays open, so the query starts on it and the others
  // wait for its first collective), then killed for good (no supervisor starts it again).
  tier.gateways[victim]->signal(SIGSTOP);
  auto query = range_query("q-gw-cut", 0.05, "PM1", 16);
  query.mutable_options()->set_min_coverage(0.01);  // accept what the survivors reach
  query.mutable_options()->set_max_missing_share(1.0);
  grpc::Status cut_status;
  v1::QueryResult cut;
  std::jthread asking([&] { cut_status = AnalystClient(leader).range(query, cut); });
  const auto running_by = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < running_by) {
    const auto intent = tier.store->intent("q-gw-cut");
    if (intent && *intent) break;
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(200ms);  // the QueryStart is out: the others wait for the victim
  tier.gateways[victim].reset();
  asking.join();
  // The survivors finished it: degraded, the victim's shards named, their users unanswered.
  INFO(cut_status.error_message());
  REQUIRE(cut_status.ok());
  CHECK(cut.degraded());
  CHECK(std::vector<std::uint32_t>(cut.lost_shards().begin(), cut.lost_shards().end()) ==
        lost_shards);
  const std::set<std::uint32_t> unanswered(cut.unanswered().begin(), cut.unanswered().end());
  for (std::uint32_t user : lost_users) CHECK(unanswered.count(user) == 1);
  CHECK(cut.coverage().answered() <= kProgramDevices - lost_users.size());
  // Kept as it was given, degraded, with its lost shards.
  AnalystClient analyst(leader);
  v1::QueryResult kept;
  REQUIRE(analyst.result("q-gw-cut", kept).ok());
  CHECK(kept.degraded());
  CHECK(kept.lost_shards_size() == static_cast<int>(lost_shards.size()));
  const auto stored = tier.store->result("q-gw-cut");
  REQUIRE(stored);
  REQUIRE(*stored);
  CHECK((*stored)->degraded);
  CHECK((*stored)->lost_shards == lost_shards);
  // Once the victim's lease lapsed, its shards belong to the survivors, HAProxy sends its devices
  // there, and the next query asks every device.
  REQUIRE(tier.everyone_answers("after-"));
  const auto owners = tier.store->shard_owners();
  REQUIRE(owners);
  std::size_t on_survivors = 0;
  for (const auto& owner : *owners) on_survivors += owner.gateway_id != victim_id ? 1 : 0;
  CHECK(on_survivors == kProgramShards);
  CHECK(tier.check_mirror_below_ledgers() == kProgramDevices);
}

TEST_CASE(
    "cluster program: a device enrolled after its gateway loaded is listed unanswered until the "
    "gateway takes it in and a revoked one is asked no more",
    "[transport][cluster][exec]") {
  CGP_SEEDED(34);
  const auto points = test::uniform_square(kProgramDevices + 1, 1000, seed);
  // Gateways restart for late enrolments once they have served 15 s: the first query below
  // comes before that.
  LiveTier tier(points, seed, 15s);
  REQUIRE(tier.everyone_answers("warm-"));
  const auto late =
      tier.store->enrol("device-" + std::to_string(kProgramDevices),
                        transport::sha256_of("key-" + std::to_string(kProgramDevices)));
  REQUIRE(late);
  REQUIRE(tier.store->revoke("device-0"));
  // Its gateway admits it at its next lease renewal (every 500 ms here); a Hello before that is
  // refused by its credential, as an unknown id's is, and the device link takes that as final.
  std::this_thread::sleep_for(3s);
  tier.phones->add(points, seed);
  tier.serve_phone(kProgramDevices);
  const std::string leader = tier.leader_address();
  REQUIRE_FALSE(leader.empty());
  AnalystClient analyst(leader);
  auto query = range_query("late-0", 1e-3, "BM0", 0);
  query.mutable_options()->set_min_coverage(0.5);
  query.mutable_options()->set_max_missing_share(1.0);
  v1::QueryResult first;
  const auto status = analyst.range(query, first);
  INFO(status.error_message());
  REQUIRE(status.ok());
  // The late device: no gateway knows it yet, so it is listed unanswered (never counted as
  // answered). The revoked device: not part of the query, not charged.
  CHECK(first.users() == kProgramDevices + 1);
  CHECK(first.coverage().users() == kProgramDevices);  // 13 enrolled, 1 revoked
  const std::set<std::uint32_t> unanswered(first.unanswered().begin(), first.unanswered().end());
  CHECK(unanswered.count(static_cast<std::uint32_t>(late->user_index)) == 1);
  for (const auto& charge : first.charges()) CHECK(charge.user() != 0);
  // Its gateway restarts to take it in; from then on it answers (and the revoked one still not).
  REQUIRE(tier.everyone_answers("late-after-", kProgramDevices));
  v1::QueryResult after;
  REQUIRE(analyst.range(range_query("late-last", 1e-3, "BM0", 0), after).ok());
  for (const auto& charge : after.charges()) CHECK(charge.user() != 0);
  CHECK(std::find(after.unanswered().begin(), after.unanswered().end(),
                  static_cast<std::uint32_t>(late->user_index)) == after.unanswered().end());
}

TEST_CASE("cluster program: PostgreSQL restarted under load loses no result and no charge",
          "[transport][cluster][exec]") {
  CGP_SEEDED(33);
  LiveTier tier(test::uniform_square(kProgramDevices, 1000, seed), seed);
  REQUIRE(tier.everyone_answers("warm-"));
  // Queries keep coming while the server restarts; each either finishes (and its result is kept)
  // or fails by name. None is lost.
  std::vector<std::string> finished;
  std::atomic<bool> stop{false};
  std::jthread asking([&] {
    for (int q = 0; !stop; ++q) {
      const std::string leader = tier.leader_address();
      if (leader.empty()) continue;
      AnalystClient analyst(leader);
      v1::QueryResult result;
      const std::string id = "load-" + std::to_string(q);
      if (analyst.range(range_query(id, 1e-3, "BM0", 0), result).ok()) finished.push_back(id);
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(500ms);
  REQUIRE(tier.postgres.restart());
  std::this_thread::sleep_for(3s);
  stop = true;
  asking.join();
  // The tier recovers: a leader again, every device answering.
  REQUIRE(tier.everyone_answers("recovered-"));
  const std::string leader = tier.leader_address();
  REQUIRE_FALSE(leader.empty());
  AnalystClient analyst(leader);
  INFO(finished.size() << " queries finished while the server restarted");
  CHECK_FALSE(finished.empty());
  for (const auto& id : finished) {
    v1::QueryResult kept;
    INFO(id);
    CHECK(analyst.result(id, kept).ok());
  }
  CHECK(tier.check_mirror_below_ledgers() == kProgramDevices);
}

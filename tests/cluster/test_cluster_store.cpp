// The live tier's PostgreSQL store (cgp/cluster/cluster_store.hpp) against a real server of the
// test's own: schema migrations, enrolment, gateway leases, shard ownership, the coordinator's
// lease and its fencing, query intents and results, mirror snapshots, and a server restart.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/mirror_blob.hpp"
#include "cgp/cluster/postgres.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "support/scratch_postgres.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::cluster;
using namespace std::chrono_literals;

namespace {

Sha256 digest(unsigned char fill) {
  Sha256 d;
  d.fill(fill);
  return d;
}

std::unique_ptr<ClusterStore> open_store(const test::ScratchPostgres& server) {
  auto store = ClusterStore::open(server.conninfo());
  INFO((store ? std::string() : store.error().to_string()));
  REQUIRE(store);
  return std::move(*store);
}

std::unique_ptr<ClusterStore> fleet_store(const test::ScratchPostgres& server,
                                          std::uint32_t shards = 64) {
  auto store = open_store(server);
  REQUIRE(store->initialize({shards, 4.0}));
  return store;
}

}  // namespace

TEST_CASE("cluster store: migrations run once and a newer schema is refused", "[cluster]") {
  test::ScratchPostgres server;
  auto first = open_store(server);
  auto second = open_store(server);  // the schema is there: nothing to do
  CHECK(*first->schema_version() == kSchemaVersion);
  CHECK(*second->schema_version() == kSchemaVersion);
  REQUIRE(first->connection().run("INSERT INTO cgp_schema (version) VALUES (99)"));
  auto refused = ClusterStore::open(server.conninfo());
  REQUIRE_FALSE(refused);
  CHECK(refused.error().parameter == "postgres");
  CHECK(refused.error().message.find("newer than this build") != std::string::npos);
}

TEST_CASE("cluster store: bad connection strings and unreachable servers are named", "[cluster]") {
  auto malformed = ClusterStore::open("host='unterminated");
  REQUIRE_FALSE(malformed);
  CHECK(malformed.error().code == ErrorCode::invalid_argument);
  CHECK(malformed.error().parameter == "postgres");
  auto unreachable = ClusterStore::open("host=/nonexistent-cgp-folder port=5432 connect_timeout=2");
  REQUIRE_FALSE(unreachable);
  CHECK(unreachable.error().code == ErrorCode::unavailable);
  CHECK(unreachable.error().parameter == "postgres");
}

TEST_CASE("cluster store: fleet settings are set once", "[cluster]") {
  test::ScratchPostgres server;
  auto store = open_store(server);
  auto before = store->settings();
  REQUIRE_FALSE(before);
  CHECK(before.error().parameter == "cluster");
  CHECK(store->initialize({0, 1.0}).error().parameter == "shard_count");
  CHECK(store->initialize({64, -1.0}).error().parameter == "budget");
  REQUIRE(store->initialize({64, 4.0}));
  REQUIRE(store->initialize({64, 4.0}));  // the same again: fine
  const Status changed = store->initialize({128, 4.0});
  REQUIRE_FALSE(changed);
  CHECK(changed.error().code == ErrorCode::already_exists);
  CHECK(store->settings()->shard_count == 64);
}

TEST_CASE("cluster store: enrolment hands out dense indices and keeps them through revokes",
          "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  std::vector<std::pair<std::string, Sha256>> devices;
  for (int i = 0; i < 300; ++i) devices.push_back({"device-" + std::to_string(i), digest(1)});
  auto enrolled = store->enrol_all(devices);
  REQUIRE(enrolled);
  for (std::size_t i = 0; i < enrolled->size(); ++i) {
    CHECK((*enrolled)[i].user_index == i);
    CHECK((*enrolled)[i].shard == protocol::virtual_shard(devices[i].first, 64));
  }
  CHECK(*store->fleet_users() == 300);

  auto again = store->enrol("device-7", digest(2));
  REQUIRE_FALSE(again);
  CHECK(again.error().code == ErrorCode::already_exists);
  CHECK(again.error().parameter == "device_id");
  // A batch with one enrolled id changes nothing.
  const std::vector<std::pair<std::string, Sha256>> batch{{"new-1", digest(3)},
                                                          {"device-8", digest(3)}};
  REQUIRE_FALSE(store->enrol_all(batch));
  CHECK(*store->fleet_users() == 300);

  REQUIRE(store->revoke("device-7"));
  CHECK(store->revoke("never-enrolled").error().parameter == "device_id");
  const std::uint32_t shard = protocol::virtual_shard("device-7", 64);
  auto in_shard = store->enrolled_in(std::vector<std::uint32_t>{shard});
  REQUIRE(in_shard);
  const auto seven = std::find_if(in_shard->begin(), in_shard->end(),
                                  [](const EnrolledUser& u) { return u.device_id == "device-7"; });
  REQUIRE(seven != in_shard->end());
  CHECK_FALSE(seven->credential.has_value());
  for (const EnrolledUser& u : *in_shard) CHECK(u.shard == shard);
  CHECK(std::is_sorted(in_shard->begin(), in_shard->end(),
                       [](const auto& a, const auto& b) { return a.user_index < b.user_index; }));

  auto back = store->enrol("device-7", digest(9));  // re-enrolled: same index, new credential
  REQUIRE(back);
  CHECK(back->user_index == 7);
  CHECK(*store->fleet_users() == 300);
  CHECK(store->enrol("", digest(1)).error().parameter == "device_id");
  CHECK(store->enrol(std::string(129, 'x'), digest(1)).error().parameter == "device_id");
  CHECK(store->enrol("a device", digest(1)).error().parameter == "device_id");
  CHECK(store->enrol("line\nbreak", digest(1)).error().parameter == "device_id");
}

TEST_CASE("cluster store: concurrent enrolments get distinct dense indices", "[cluster]") {
  test::ScratchPostgres server;
  fleet_store(server);
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      auto store = ClusterStore::open(server.conninfo());
      if (!store) return;
      for (int i = 0; i < 25; ++i)
        (void)(*store)->enrol("w" + std::to_string(w) + "-" + std::to_string(i), digest(1));
    });
  for (auto& writer : writers) writer.join();
  auto store = open_store(server);
  CHECK(*store->fleet_users() == 100);
  std::vector<std::uint32_t> all(64);
  for (std::uint32_t s = 0; s < 64; ++s) all[s] = s;
  auto users = store->enrolled_in(all);
  REQUIRE(users);
  REQUIRE(users->size() == 100);
  for (std::size_t i = 0; i < users->size(); ++i) CHECK((*users)[i].user_index == i);
}

TEST_CASE("cluster store: gateway leases keep their token while unbroken", "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  CHECK(store->renew_lease("gw-unknown", "x:1", 1s).error().parameter == "gateway_id");
  REQUIRE(store->register_gateway("gw-1", digest(5)));
  REQUIRE(store->register_gateway("gw-2", digest(6)));
  CHECK(**store->gateway_credential("gw-1") == digest(5));
  CHECK_FALSE(store->gateway_credential("gw-9")->has_value());
  CHECK(store->renew_lease("gw-1", "x:1", 0ms).error().parameter == "lease_ttl");
  // The address goes into HAProxy's configuration: host:port only.
  for (const std::string bad : {"x", "x:0", "x:70000", "x:1\nlisten evil", "a b:1", "[zz]:1", ":1"})
    CHECK(store->renew_lease("gw-1", bad, 1s).error().parameter == "address");
  CHECK(store->renew_lease("gw-1", "[::1]:7000", 1s));

  const std::int64_t token = *store->renew_lease("gw-1", "127.0.0.1:7001", 10s);
  CHECK(*store->renew_lease("gw-1", "127.0.0.1:7001", 10s) == token);  // unbroken
  REQUIRE(store->renew_lease("gw-2", "127.0.0.1:7002", 200ms));
  auto gateways = store->gateways();
  REQUIRE(gateways);
  REQUIRE(gateways->size() == 2);
  CHECK((*gateways)[0].alive);
  CHECK((*gateways)[0].address == "127.0.0.1:7001");
  std::this_thread::sleep_for(400ms);
  CHECK_FALSE((*store->gateways())[1].alive);  // gw-2's lease lapsed
  const std::int64_t lapsed = (*store->gateways())[1].lease_token;
  CHECK(*store->renew_lease("gw-2", "127.0.0.1:7002", 10s) == lapsed + 1);  // taken anew
  REQUIRE(store->drop_lease("gw-1"));
  CHECK_FALSE((*store->gateways())[0].alive);
}

TEST_CASE("cluster store: a moved shard's epoch rises and its old owner is fenced", "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  REQUIRE(store->register_gateway("gw-1", digest(1)));
  REQUIRE(store->register_gateway("gw-2", digest(2)));
  const std::vector<std::pair<std::uint32_t, std::string>> first{{0, "gw-1"}, {1, "gw-1"}};
  const std::int64_t epoch = **store->try_lead();  // only the leader moves shards
  auto owners = store->assign_shards(epoch, first);
  REQUIRE(owners);
  REQUIRE(owners->size() == 2);
  CHECK((*owners)[0].epoch == 1);
  CHECK(store->assign_shards(epoch, first)->at(0).epoch == 1);  // not moved: same epoch

  const std::vector<MirrorEntry> entries{{3, 4.0}, {9, 2.5}};
  const ShardSnapshot snapshot{0, encode_mirror_blob(entries), "q-1"};
  const std::vector<std::pair<ShardSnapshot, std::int64_t>> save{{snapshot, 1}};
  REQUIRE(store->save_snapshots("gw-1", save));

  const std::vector<std::pair<std::uint32_t, std::string>> move{{0, "gw-2"}};
  CHECK(store->assign_shards(epoch, move)->at(0).epoch == 2);
  // The old owner, and the new owner with the old epoch, change nothing.
  const ShardSnapshot newer{0, encode_mirror_blob(std::vector<MirrorEntry>{{3, 9.0}}), "q-2"};
  const std::vector<std::pair<ShardSnapshot, std::int64_t>> stale{{newer, 1}};
  CHECK(store->save_snapshots("gw-1", stale).error().parameter == "epoch");
  CHECK(store->save_snapshots("gw-2", stale).error().parameter == "epoch");
  // A snapshot for a shard nobody was given is refused too.
  const std::vector<std::pair<ShardSnapshot, std::int64_t>> orphan{
      {ShardSnapshot{7, snapshot.blob, "q-2"}, 1}};
  CHECK(store->save_snapshots("gw-1", orphan).error().parameter == "epoch");
  // Shards past the fleet, a shard twice, and a stale leader move nothing.
  const std::vector<std::pair<std::uint32_t, std::string>> past{{64, "gw-1"}};
  CHECK(store->assign_shards(epoch, past).error().parameter == "shard");
  const std::vector<std::pair<std::uint32_t, std::string>> twice{{1, "gw-1"}, {1, "gw-2"}};
  CHECK(store->assign_shards(epoch, twice).error().parameter == "shard");
  CHECK(store->assign_shards(epoch - 1, move).error().parameter == "epoch");
  auto kept = store->snapshots(std::vector<std::uint32_t>{0, 7});
  REQUIRE(kept);
  REQUIRE(kept->size() == 1);
  CHECK(kept->front().as_of_query == "q-1");
  CHECK(*decode_mirror_blob(kept->front().blob) == entries);
}

TEST_CASE("cluster store: one coordinator leads, and a new leader fences the old one",
          "[cluster]") {
  test::ScratchPostgres server;
  auto leader = fleet_store(server);
  auto standby = open_store(server);
  auto epoch = leader->try_lead();
  REQUIRE(epoch);
  REQUIRE(epoch->has_value());
  CHECK(leader->still_leading());
  CHECK_FALSE(standby->try_lead()->has_value());  // the lock is held
  CHECK(*leader->try_lead() == *epoch);           // asking again changes nothing

  REQUIRE(leader->begin_query("q-1", **epoch, "spec-bytes"));
  REQUIRE(leader->round_sent("q-1", **epoch, 0.25));
  REQUIRE(leader->round_sent("q-1", **epoch, 0.5));
  CHECK(leader->round_sent("q-9", **epoch, 0.5).error().parameter == "query_id");
  CHECK(leader->round_sent("q-1", **epoch, -1).error().parameter == "worst_charge");

  // The leader's session ends (as when its process dies): the standby takes over.
  const int pid = leader->connection().backend_pid();
  REQUIRE(standby->connection().run("SELECT pg_terminate_backend($1)", {PgParam::integer(pid)}));
  // The backend exits (and its lock goes) shortly after pg_terminate_backend returns: a standby
  // polls, as it does in a cluster.
  auto taken = standby->try_lead();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (taken && !taken->has_value() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
    taken = standby->try_lead();
  }
  REQUIRE(taken);
  REQUIRE(taken->has_value());
  CHECK(**taken == **epoch + 1);
  auto running = standby->running_queries();
  REQUIRE(running);
  REQUIRE(running->size() == 1);
  CHECK(running->front().spec == "spec-bytes");
  CHECK(running->front().round_worst_charges == std::vector<double>{0.25, 0.5});
  CHECK(running->front().coordinator_epoch == **epoch);

  // The old leader knows at once that it no longer leads (one statement), and a write of its
  // finds its session gone (unavailable: retry) or, on a new session, is fenced.
  CHECK_FALSE(leader->still_leading());
  Status late = leader->round_sent("q-1", **epoch, 0.5);
  if (!late && late.error().code == ErrorCode::unavailable)
    late = leader->round_sent("q-1", **epoch, 0.5);
  REQUIRE_FALSE(late);
  CHECK(late.error().parameter == "epoch");
  CHECK_FALSE(leader->still_leading());
  CHECK(leader->finish_query("q-1", **epoch, {"q-1", "r", false, {}}).error().parameter == "epoch");
  CHECK(standby->running_queries()->front().round_worst_charges.size() == 2);

  // The new leader ends it: a result with the shards it lost.
  REQUIRE(standby->finish_query("q-1", **taken, {"q-1", "result-bytes", true, {3, 17}}));
  CHECK(standby->running_queries()->empty());
  auto stored = standby->result("q-1");
  REQUIRE(stored);
  REQUIRE(stored->has_value());
  CHECK((*stored)->result == "result-bytes");
  CHECK((*stored)->degraded);
  CHECK((*stored)->lost_shards == std::vector<std::uint32_t>{3, 17});
  CHECK_FALSE(standby->result("q-2")->has_value());
  CHECK(standby->finish_query("q-1", **taken, {"q-1", "again", false, {}}).error().parameter ==
        "query_id");
  REQUIRE(standby->begin_query("q-2", **taken, "s"));
  REQUIRE(standby->abort_query("q-2", **taken, "gateways lost"));
  CHECK(standby->begin_query("q-2", **taken, "s").error().code == ErrorCode::already_exists);
  REQUIRE(standby->record_round("q-2", 0, "gw-1", {10, 8, 1, 1}));
  REQUIRE(standby->record_round("q-2", 0, "gw-1", {10, 8, 1, 1}));  // a retry: no-op
}

TEST_CASE(
    "cluster store: a shard's snapshot is lowered by every round begun after what it holds, "
    "whatever became of the query",
    "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  REQUIRE(store->register_gateway("gw-0", digest(1)));
  const std::int64_t epoch = **store->try_lead();
  REQUIRE(store->assign_shards(epoch, std::vector<std::pair<std::uint32_t, std::string>>{
                                          {0, "gw-0"}, {1, "gw-0"}, {2, "gw-0"}}));
  const std::uint32_t shards[] = {0, 1, 2, 3};
  // No snapshot: never served, nothing is owed on it.
  CHECK(store->unsettled_charges(shards)->charges == std::vector<double>{0, 0, 0, 0});
  const auto owners = *store->shard_owners();
  const auto snapshot_of = [&](std::uint32_t shard, const std::string& as_of_query) {
    std::int64_t held = 0;
    for (const auto& o : owners)
      if (o.shard == shard) held = o.epoch;
    return std::pair<ShardSnapshot, std::int64_t>{{shard, encode_mirror_blob({}), as_of_query},
                                                  held};
  };
  const auto begin = [&](const std::string& id, std::vector<double> rounds, bool adaptive) {
    REQUIRE(store->begin_query(id, epoch, "spec", adaptive));
    for (double charge : rounds) REQUIRE(store->round_sent(id, epoch, charge));
  };
  begin("q-before", {0.25}, false);
  // Shard 1 as a gateway loads it: dated by the load's read, after q-before.
  const std::uint32_t one[] = {1};
  const auto read = store->unsettled_charges(one);
  REQUIRE(read);
  REQUIRE(store->save_snapshots("gw-0", std::vector{snapshot_of(1, "(loaded)")}, read->as_of));
  begin("q-after-1", {0.5, 0.125}, false);
  begin("q-finished", {1.0}, false);
  REQUIRE(store->finish_query("q-finished", epoch, {"q-finished", "result", false, {}}));
  // Shard 0's snapshot as of q-after-1, written only now (after q-finished began, as a gateway
  // that was still finishing an aborted query would): q-finished is not in it, and counts.
  REQUIRE(store->save_snapshots("gw-0", std::vector{snapshot_of(0, "q-after-1")}));
  // A query id without an intent: the snapshot holds nothing certain, every query counts.
  REQUIRE(store->save_snapshots("gw-0", std::vector{snapshot_of(2, "not-an-intent")}));
  begin("q-aborted", {2.0}, true);
  REQUIRE(store->abort_query("q-aborted", epoch, "21 gateway\ngateway: lost"));
  CHECK(store->unsettled_charges(shards)->charges == std::vector<double>{3.0, 3.625, 3.875, 0});
  // The intents as kept, and Alg. 3's count.
  const auto aborted = store->intent("q-aborted");
  REQUIRE(aborted);
  REQUIRE(aborted->has_value());
  CHECK((*aborted)->state == "aborted");
  CHECK((*aborted)->reason == "21 gateway\ngateway: lost");
  CHECK_FALSE(store->intent("q-never")->has_value());
  CHECK(*store->adaptive_queries() == 1);
  CHECK(store->begin_query("q-finished", epoch, "spec").error().code == ErrorCode::already_exists);
}

TEST_CASE("cluster store: the leader announces where it serves, fenced by its epoch", "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  CHECK(store->leader()->control_address.empty());
  const std::int64_t epoch = **store->try_lead();
  REQUIRE(store->announce_leader(epoch, "10.0.0.5:7072", "10.0.0.5:7071"));
  const auto leader = store->leader();
  REQUIRE(leader);
  CHECK(leader->epoch == epoch);
  CHECK(leader->control_address == "10.0.0.5:7072");
  CHECK(leader->analyst_address == "10.0.0.5:7071");
  CHECK(store->announce_leader(epoch + 1, "10.0.0.6:7072", "10.0.0.6:7071").error().parameter ==
        "epoch");
  CHECK(store->announce_leader(epoch, "not an address", "10.0.0.5:7071").error().parameter ==
        "control_address");
  CHECK(store->leader()->control_address == "10.0.0.5:7072");
  // Revoked users, ascending.
  REQUIRE(store->enrol("a", digest(1)));
  REQUIRE(store->enrol("b", digest(2)));
  REQUIRE(store->enrol("c", digest(3)));
  REQUIRE(store->revoke("c"));
  REQUIRE(store->revoke("a"));
  CHECK(*store->revoked_users() == std::vector<std::uint32_t>{0, 2});
}

TEST_CASE("cluster store: a restarted server is dialled again and leadership is lost",
          "[cluster]") {
  test::ScratchPostgres server;
  auto store = fleet_store(server);
  REQUIRE(store->try_lead()->has_value());
  REQUIRE(store->enrol("device-1", digest(1)));
  REQUIRE(server.restart());
  // The first statement finds the session gone, re-dials, and runs; data survived.
  auto users = store->fleet_users();
  if (!users) {
    CHECK(users.error().code == ErrorCode::unavailable);
    users = store->fleet_users();
  }
  REQUIRE(users);
  CHECK(*users == 1);
  CHECK_FALSE(store->still_leading());  // the advisory lock went with the old session
  REQUIRE(store->try_lead()->has_value());
  CHECK(store->still_leading());
}

TEST_CASE("mirror blobs round-trip and hostile blobs are refused by name", "[cluster]") {
  CGP_SEEDED(30);
  std::mt19937_64 random(seed);
  std::vector<MirrorEntry> entries;
  std::uint64_t index = 0;
  for (int i = 0; i < 100000; ++i) {
    index += 1 + random() % 7;
    entries.push_back({index, std::ldexp(static_cast<double>(random() >> 11), -53) * 4});
  }
  const std::string blob = encode_mirror_blob(entries);
  CHECK(blob.size() == 16 + 16 * entries.size());
  CHECK(*decode_mirror_blob(blob) == entries);
  CHECK(decode_mirror_blob(encode_mirror_blob({}))->empty());

  std::string truncated = blob.substr(0, blob.size() - 1);
  std::string wrong_magic = blob;
  wrong_magic[0] = 'X';
  std::string huge_count = blob;
  huge_count[15] = '\x7f';
  std::string unsorted = encode_mirror_blob(std::vector<MirrorEntry>{{5, 1}, {5, 1}});
  std::string future = blob;
  future[4] = 2;
  for (const std::string& bad :
       {truncated, wrong_magic, huge_count, unsorted, future, std::string("CGPM")}) {
    auto decoded = decode_mirror_blob(bad);
    REQUIRE_FALSE(decoded);
    CHECK(decoded.error().parameter == "mirror_blob");
  }
}

// cgp-cluster, the operator's commands on a live tier's PostgreSQL, as a process against a server
// of the test's own: init once, enrol one device or many with credential files only their owner
// reads (the cluster keeps digests), revoke, register a gateway, status; files never
// overwritten, and bad arguments named with exit 2.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "cgp/cluster/cluster_store.hpp"
#include "support/run_program.hpp"
#include "support/scratch_postgres.hpp"

using namespace cgp;
namespace fs = std::filesystem;

namespace {

test::ProgramRun run_cluster(std::vector<std::string> arguments, const fs::path& scratch) {
  arguments.insert(arguments.begin(), CGP_CLUSTER_PATH);
  return test::run_program(std::move(arguments), scratch);
}

}  // namespace

TEST_CASE("cgp-cluster: init, enrol, revoke, add-gateway and status on a real server",
          "[cluster][exec]") {
  test::ScratchPostgres server;
  const fs::path scratch = fs::path(server.folder()) / "admin";
  fs::create_directories(scratch);
  const std::string db = server.conninfo();

  CHECK(run_cluster({"status", "--cluster", db}, scratch).exit_code == 1);  // not set up yet
  REQUIRE(run_cluster({"init", "--cluster", db, "--shards", "64", "--budget", "2"}, scratch)
              .exit_code == 0);
  auto again = run_cluster({"init", "--cluster", db, "--shards", "128", "--budget", "2"}, scratch);
  CHECK(again.exit_code == 1);  // a fleet's shard count never changes
  CHECK(again.err.find("already") != std::string::npos);
  CHECK(
      run_cluster({"init", "--cluster", db, "--shards", "0", "--budget", "2"}, scratch).exit_code ==
      2);

  const fs::path key = scratch / "phone-1.key";
  auto one = run_cluster(
      {"enrol", "--cluster", db, "--id", "phone-1", "--credential-out", key.string()}, scratch);
  REQUIRE(one.exit_code == 0);
  CHECK(one.out.find("phone-1: user 0, shard") != std::string::npos);
  CHECK((fs::status(key).permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
        fs::perms::none);
  std::string secret = test::read_whole(key);
  while (!secret.empty() && secret.back() == '\n') secret.pop_back();
  CHECK(secret.size() == 64);
  // The file is never overwritten, and an id is enrolled once.
  CHECK(run_cluster({"enrol", "--cluster", db, "--id", "phone-2", "--credential-out", key.string()},
                    scratch)
            .exit_code == 2);
  CHECK(run_cluster({"enrol", "--cluster", db, "--id", "phone-1", "--credential-out",
                     (scratch / "other.key").string()},
                    scratch)
            .exit_code == 1);
  CHECK(run_cluster({"enrol", "--cluster", db, "--id", "phone-3"}, scratch).exit_code == 2);

  const fs::path secrets = scratch / "swarm.csv";
  REQUIRE(run_cluster({"enrol", "--cluster", db, "--count", "50", "--prefix", "d-", "--secrets-out",
                       secrets.string()},
                      scratch)
              .exit_code == 0);
  const std::string lines = test::read_whole(secrets);
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 50);
  REQUIRE(run_cluster({"revoke", "--cluster", db, "--id", "d-7"}, scratch).exit_code == 0);
  CHECK(run_cluster({"revoke", "--cluster", db, "--id", "nobody"}, scratch).exit_code == 1);

  const fs::path gateway_key = scratch / "gw-1.key";
  REQUIRE(run_cluster({"add-gateway", "--cluster", db, "--id", "gw-1", "--credential-out",
                       gateway_key.string()},
                      scratch)
              .exit_code == 0);
  auto status = run_cluster({"status", "--cluster", db}, scratch);
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.find("shards 64, budget 2, users 51") != std::string::npos);
  CHECK(status.out.find("gateway gw-1") != std::string::npos);

  // What the commands wrote is what the cluster holds: digests of the secrets they made.
  auto store = *cluster::ClusterStore::open(db);
  std::vector<std::uint32_t> all(64);
  for (std::uint32_t s = 0; s < 64; ++s) all[s] = s;
  const auto users = *store->enrolled_in(all);
  REQUIRE(users.size() == 51);
  CHECK(users[0].device_id == "phone-1");
  CHECK_FALSE(users[8].credential.has_value());  // d-7 is user 8: revoked, index kept
  CHECK(store->gateway_credential("gw-1")->has_value());
  CHECK(run_cluster({"status", "--cluster", "host=/nonexistent-folder connect_timeout=2"}, scratch)
            .exit_code == 1);
}

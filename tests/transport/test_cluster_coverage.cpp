// The round driver runs a query only over gateways that hold every shard of the fleet exactly
// once under the epochs the cluster gives (transport::gateways_cover_fleet): a gateway that has
// not reloaded after a move, a shard held twice, or a shard nobody attached holds is refused by
// name ("shards"), before anything is sent.
#include <catch2/catch.hpp>

#include "cgp/transport/cluster_analyst.hpp"

using namespace cgp;
using transport::AttachedGateway;
using transport::QueryJournal;

namespace {

QueryJournal::Fleet fleet_of_four() {
  QueryJournal::Fleet fleet;
  fleet.shard_count = 4;
  fleet.owners = {{0, {"gw-a", 1}}, {1, {"gw-a", 1}}, {2, {"gw-b", 3}}, {3, {"gw-b", 2}}};
  return fleet;
}

}  // namespace

TEST_CASE("cluster coverage: every shard once under its epoch, or a named refusal",
          "[transport][cluster]") {
  const auto fleet = fleet_of_four();
  std::vector<AttachedGateway> attached{{"gw-a", {{0, 1}, {1, 1}}, 10},
                                        {"gw-b", {{2, 3}, {3, 2}}, 12}};
  CHECK(transport::gateways_cover_fleet(attached, fleet));

  SECTION("a gateway holding a shard under an old epoch (it has not reloaded)") {
    attached[1].shards[0].second = 2;
    const auto refused = transport::gateways_cover_fleet(attached, fleet);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code == ErrorCode::unavailable);
    CHECK(refused.error().parameter == "shards");
    CHECK(refused.error().message.find("shard 2") != std::string::npos);
  }
  SECTION("a shard another gateway owns now") {
    attached[0].shards.push_back({2, 3});
    const auto refused = transport::gateways_cover_fleet(attached, fleet);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().parameter == "shards");
  }
  SECTION("a gateway not attached: its shards are named as missing") {
    attached.pop_back();
    const auto refused = transport::gateways_cover_fleet(attached, fleet);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("2 of 4 shards") != std::string::npos);
    CHECK(refused.error().message.find("gw-b") != std::string::npos);
  }
  SECTION("a shard nobody owns yet") {
    auto unowned = fleet;
    unowned.owners.erase(3);
    attached[1].shards.pop_back();
    const auto refused = transport::gateways_cover_fleet(attached, unowned);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("no owner yet") != std::string::npos);
  }
}

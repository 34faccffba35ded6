// The coordinator's merge of gateways' collectives (transport/src/reducer_hub.hpp): sums added,
// gathers concatenated in participant order, and every contribution that cannot be a step of
// one engine run refused by name.
#include <catch2/catch.hpp>
#include <limits>

#include "reducer_hub.hpp"

using namespace cgp;
using cgp::transport::detail::ReducerHub;

namespace {
v1::Collective sum(const std::string& query, std::uint64_t sequence,
                   std::vector<std::uint64_t> values) {
  v1::Collective c;
  c.set_query_id(query);
  c.set_sequence(sequence);
  c.set_kind(v1::COLLECTIVE_SUM);
  for (auto v : values) c.add_sums(v);
  return c;
}
v1::Collective gather(const std::string& query, std::uint64_t sequence,
                      std::vector<double> values) {
  v1::Collective c;
  c.set_query_id(query);
  c.set_sequence(sequence);
  c.set_kind(v1::COLLECTIVE_GATHER);
  for (auto v : values) c.add_values(v);
  return c;
}
}  // namespace

TEST_CASE("reducer hub: merges once every gateway contributed", "[transport][cluster]") {
  ReducerHub hub;
  REQUIRE(hub.begin("q", 3));
  CHECK(hub.begin("q", 3).error().code == ErrorCode::already_exists);
  CHECK_FALSE(hub.contribute(2, sum("q", 0, {1, 10}))->has_value());
  CHECK_FALSE(hub.contribute(0, sum("q", 0, {2, 20}))->has_value());
  auto merged = hub.contribute(1, sum("q", 0, {3, 30}));
  REQUIRE(merged);
  REQUIRE(merged->has_value());
  CHECK((*merged)->sequence() == 0);
  CHECK(std::vector<std::uint64_t>((*merged)->sums().begin(), (*merged)->sums().end()) ==
        std::vector<std::uint64_t>{6, 60});
  // A gather: in participant order, whatever order they came in.
  CHECK_FALSE(hub.contribute(1, gather("q", 1, {1.5}))->has_value());
  CHECK_FALSE(hub.contribute(0, gather("q", 1, {0.5, 0.25}))->has_value());
  auto all = hub.contribute(2, gather("q", 1, {}));
  REQUIRE(all->has_value());
  CHECK(std::vector<double>((*all)->values().begin(), (*all)->values().end()) ==
        std::vector<double>{0.5, 0.25, 1.5});
  hub.end("q");
  CHECK(hub.open_queries() == 0);
  CHECK(hub.contribute(0, sum("q", 2, {1})).error().parameter == "query_id");
}

TEST_CASE("reducer hub: contributions that cannot be one engine's steps are refused",
          "[transport][cluster]") {
  ReducerHub hub;
  CHECK(hub.begin("q", 0).error().parameter == "participants");
  REQUIRE(hub.begin("q", 2));
  const auto refused = [&](std::size_t from, const v1::Collective& c) {
    auto result = hub.contribute(from, c);
    REQUIRE_FALSE(result);
    CHECK(result.error().parameter == "collective");
  };
  refused(5, sum("q", 0, {1}));  // not a participant
  refused(0, sum("q", 1, {1}));  // out of turn
  REQUIRE(hub.contribute(0, sum("q", 0, {1, 2})));
  refused(0, sum("q", 0, {1, 2}));  // twice
  refused(1, gather("q", 0, {1}));  // another kind
  refused(1, sum("q", 0, {1}));     // another length
  v1::Collective unknown = sum("q", 0, {1, 2});
  unknown.set_kind(v1::COLLECTIVE_UNSPECIFIED);
  refused(1, unknown);
  v1::Collective mixed = sum("q", 0, {1, 2});
  mixed.add_values(1.0);
  refused(1, mixed);
  REQUIRE(hub.contribute(1, sum("q", 0, {1, 2}))->has_value());  // the honest one still merges

  REQUIRE(hub.begin("big", 2));
  refused(0, sum("big", 0, std::vector<std::uint64_t>(ReducerHub::kMaxSums + 1, 1)));
  refused(0, gather("big", 0, std::vector<double>(ReducerHub::kMaxGatherValues + 1, 1.0)));
  refused(0, gather("big", 0, {1.0, std::numeric_limits<double>::quiet_NaN()}));
  refused(0, gather("big", 0, {std::numeric_limits<double>::infinity()}));
  const auto max = std::numeric_limits<std::uint64_t>::max();
  REQUIRE(hub.contribute(0, sum("big", 0, {max})));
  refused(1, sum("big", 0, {1}));  // the sum overflows
}

TEST_CASE("reducer hub: a merged gather stays within what a gateway can receive",
          "[transport][cluster]") {
  ReducerHub hub;
  const std::size_t gateways = ReducerHub::kMaxMergedValues / ReducerHub::kMaxGatherValues + 1;
  REQUIRE(hub.begin("knn", gateways));
  const std::vector<double> full(ReducerHub::kMaxGatherValues, 1.0);
  for (std::size_t g = 0; g + 1 < gateways; ++g) REQUIRE(hub.contribute(g, gather("knn", 0, full)));
  auto over = hub.contribute(gateways - 1, gather("knn", 0, {1.0}));
  REQUIRE_FALSE(over);
  CHECK(over.error().parameter == "collective");
  CHECK(hub.waiting_for("knn", gateways - 1));
  CHECK_FALSE(hub.waiting_for("knn", 0));
}

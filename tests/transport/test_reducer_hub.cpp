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

namespace {
v1::Collective tally(const std::string& query, std::uint64_t sequence,
                     std::vector<std::uint64_t> values, std::vector<std::uint64_t> decided = {}) {
  v1::Collective c = sum(query, sequence, std::move(values));
  c.set_tally(true);
  for (auto v : decided) c.add_decided(v);
  return c;
}
std::vector<std::uint64_t> sums_of(const v1::Collective& c) {
  return {c.sums().begin(), c.sums().end()};
}
}  // namespace

TEST_CASE("reducer hub: a lost gateway's later parts are zeros, nothing, or what it had decided",
          "[transport][cluster]") {
  ReducerHub hub;
  REQUIRE(hub.begin("q", 3));
  // Collective 0: gateway 2 sends its decided counts (counted 40, eliminated 2).
  CHECK_FALSE(hub.contribute(0, sum("q", 0, {1}))->has_value());
  CHECK_FALSE(hub.contribute(1, sum("q", 0, {1}))->has_value());
  v1::Collective noted = sum("q", 0, {1});
  noted.add_decided(40);
  noted.add_decided(2);
  auto first = hub.contribute(2, noted);
  REQUIRE(first->has_value());
  CHECK(sums_of(**first) == std::vector<std::uint64_t>{3});

  // Gateway 2 is lost before its part of collective 1 arrives; the others' parts complete it,
  // a sum counting zeros for it.
  CHECK_FALSE(hub.contribute(0, sum("q", 1, {4, 4}))->has_value());
  auto on_loss = hub.lose("q", 2);
  REQUIRE(on_loss);
  CHECK_FALSE(on_loss->has_value());  // gateway 1 has not contributed yet
  auto second = hub.contribute(1, sum("q", 1, {6, 6}));
  REQUIRE(second->has_value());
  CHECK(sums_of(**second) == std::vector<std::uint64_t>{10, 10});
  CHECK_FALSE(hub.waiting_for("q", 2));

  // A gather leaves it out; a tally counts the decided counts it last sent.
  CHECK_FALSE(hub.contribute(1, gather("q", 2, {2.5}))->has_value());
  auto third = hub.contribute(0, gather("q", 2, {1.5}));
  REQUIRE(third->has_value());
  CHECK(std::vector<double>((*third)->values().begin(), (*third)->values().end()) ==
        std::vector<double>{1.5, 2.5});
  CHECK_FALSE(hub.contribute(0, tally("q", 3, {10, 20}))->has_value());
  auto fourth = hub.contribute(1, tally("q", 3, {1, 2}));
  REQUIRE(fourth->has_value());
  CHECK(sums_of(**fourth) == std::vector<std::uint64_t>{51, 24});
  // A lost gateway contributes nothing more.
  CHECK(hub.contribute(2, sum("q", 4, {1})).error().parameter == "collective");

  // A loss that completes the collective in progress returns its merge; losing the last
  // gateway fails the query by name.
  CHECK_FALSE(hub.contribute(0, tally("q", 4, {3, 3}, {9, 9}))->has_value());
  auto completed = hub.lose("q", 1);
  REQUIRE(completed);
  REQUIRE(completed->has_value());
  // Gateway 1 never noted decided counts: it counts zeros.
  CHECK(sums_of(**completed) == std::vector<std::uint64_t>{3 + 40, 3 + 2});
  auto none_left = hub.lose("q", 0);
  REQUIRE_FALSE(none_left);
  CHECK(none_left.error().parameter == "gateway");
  CHECK(none_left.error().code == ErrorCode::unavailable);
}

TEST_CASE("reducer hub: a tally or decided counts of the wrong shape are refused",
          "[transport][cluster]") {
  ReducerHub hub;
  REQUIRE(hub.begin("q", 2));
  CHECK(hub.contribute(0, tally("q", 0, {1, 2, 3})).error().parameter == "collective");
  CHECK(hub.contribute(0, tally("q", 0, {1}, {1, 2, 3})).error().parameter == "collective");
  v1::Collective gathered_tally = gather("q", 0, {1.0});
  gathered_tally.set_tally(true);
  CHECK(hub.contribute(0, gathered_tally).error().parameter == "collective");
  // A tally and a plain sum cannot be the same step of one engine.
  CHECK_FALSE(hub.contribute(0, tally("q", 0, {1, 2}))->has_value());
  CHECK(hub.contribute(1, sum("q", 0, {1, 2})).error().parameter == "collective");
}

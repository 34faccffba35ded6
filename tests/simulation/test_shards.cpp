// The shard-local engine (coordinator/shard.hpp) against the whole fleet in one process: the
// same queries over 1 to 4 shards, each shard a thread with its own SimulatedFleet over its
// slice (noise keyed by global ids) and its own budget mirror, meeting in a barrier-based
// reducer. Results must be bit-identical to the unsharded run. MPI runs the same engine across
// processes (tests/experiments/mpi_check.sh).
#include <barrier>
#include <catch2/catch.hpp>
#include <deque>
#include <functional>
#include <thread>

#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/shard.hpp"
#include "fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;

namespace {

// Shards as threads of one process: each shard's reducer posts its values and waits for the
// others at a barrier; every shard then reads all posts in shard order.
class ThreadShards {
 public:
  explicit ThreadShards(std::size_t count) : barrier_(static_cast<std::ptrdiff_t>(count)) {
    for (std::size_t i = 0; i < count; ++i) reducers_.emplace_back(*this, i);
    posts_.resize(count);
  }
  ShardReducer& reducer(std::size_t index) { return reducers_[index]; }

 private:
  class Reducer final : public ShardReducer {
   public:
    Reducer(ThreadShards& group, std::size_t index) : group_(group), index_(index) {}
    void sum(std::span<std::uint64_t> values) override {
      auto& posts = group_.posts_;
      posts[index_].assign(values.begin(), values.end());  // exact: sums stay below 2^53
      group_.barrier_.arrive_and_wait();
      for (std::size_t t = 0; t < values.size(); ++t) {
        std::uint64_t total = 0;
        for (const auto& post : posts) total += static_cast<std::uint64_t>(post[t]);
        values[t] = total;
      }
      group_.barrier_.arrive_and_wait();  // nobody posts again before all have read
    }
    std::vector<double> gather(std::span<const double> local) override {
      auto& posts = group_.posts_;
      posts[index_].assign(local.begin(), local.end());
      group_.barrier_.arrive_and_wait();
      std::vector<double> all;
      for (const auto& post : posts) all.insert(all.end(), post.begin(), post.end());
      group_.barrier_.arrive_and_wait();
      return all;
    }

   private:
    ThreadShards& group_;
    std::size_t index_;
  };

  std::barrier<> barrier_;
  std::vector<std::vector<double>> posts_;
  std::deque<Reducer> reducers_;
};

struct Outcome {
  double range = 0, kde = 0;
  std::vector<std::size_t> range_asked, range_eliminated, knn_asked;
  std::vector<UserId> neighbours;
  std::vector<Charge> charged;   // range query, by global id
  std::vector<double> adaptive;  // Alg. 3 estimates
  std::string error;
};

constexpr double kBudget = 1.0;

// The queries on one shard (or the whole fleet when reducer is null).
Outcome run_queries(const std::vector<double>& all_points, std::size_t first, std::size_t size,
                    ShardReducer* reducer, std::uint64_t seed) {
  Outcome out;
  const std::size_t n = all_points.size() / 2;
  const std::vector<double> points(
      all_points.begin() + static_cast<std::ptrdiff_t>(2 * first),
      all_points.begin() + static_cast<std::ptrdiff_t>(2 * (first + size)));
  simulation::SimulatedFleetOptions fleet_options;
  fleet_options.threads = 1;
  fleet_options.first_user = static_cast<UserId>(first);
  fleet_options.borrow_points = true;  // `points` outlives the fleet
  auto fleet = simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points, 2, seed,
                                                  fleet_options);
  if (!fleet) return out.error = fleet.error().message, out;
  BudgetMirror mirror(size, kBudget);
  QueryOptions options;
  options.shard = {static_cast<UserId>(first), n, reducer};
  options.rounds = 8;

  const double lo[2] = {3000, 2000}, hi[2] = {6000, 7000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  options.method = Method::PM1;
  options.query_id = "range";
  auto count = range_count(*fleet, mirror, range, test::charge_everyone(1e-3), options);
  if (!count) return out.error = count.error().message, out;
  out.range = count->estimate;
  out.range_asked = count->report.asked_per_round;
  out.range_eliminated = count->report.eliminated_per_round;
  out.charged = count->report.charged;

  const double p[2] = {4000, 4000};
  options.method = Method::PM0;
  options.query_id = "kde";
  auto density = kde(*fleet, mirror, p, 600, test::charge_everyone(1e-3), options);
  if (!density) return out.error = density.error().message, out;
  out.kde = density->estimate;

  // kNN over the users other than global id 17 (listed per shard by local id).
  std::vector<UserId> candidates;
  for (std::size_t u = 0; u < size; ++u)
    if (first + u != 17) candidates.push_back(static_cast<UserId>(u));
  options.method = Method::PM1;
  options.query_id = "knn";
  auto near = knn(*fleet, mirror, p, 20, UserCharges::uniform(Charge{1e-3}, std::move(candidates)),
                  options);
  if (!near) return out.error = near.error().message, out;
  out.neighbours = near->neighbours;
  out.knn_asked = near->report.asked_per_round;

  options.query_id = "alg3";
  auto plan = AdaptiveBudget::fixed(0.05, 3);
  std::vector<geometry::Region> ranges(3, range);
  auto counts = adaptive_range_counts(*fleet, mirror, *plan, ranges, options);
  if (!counts) return out.error = counts.error().message, out;
  for (const auto& c : *counts) out.adaptive.push_back(c.estimate);
  return out;
}

Outcome run_sharded(const std::vector<double>& points, std::size_t shards, std::uint64_t seed) {
  const std::size_t n = points.size() / 2;
  ThreadShards group(shards);
  std::vector<Outcome> outcomes(shards);
  {
    std::vector<std::jthread> threads;
    for (std::size_t s = 0; s < shards; ++s)
      threads.emplace_back([&, s] {
        const ShardSlice slice = shard_slice(n, s, shards);
        outcomes[s] = run_queries(points, slice.first, slice.size, &group.reducer(s), seed);
      });
  }
  // Every shard holds the same global results; the per-user charges are each shard's own.
  Outcome merged = outcomes[0];
  merged.charged.clear();
  for (std::size_t s = 0; s < shards; ++s) {
    const Outcome& o = outcomes[s];
    if (!o.error.empty()) merged.error = o.error;
    CHECK(o.range == outcomes[0].range);
    CHECK(o.kde == outcomes[0].kde);
    CHECK(o.neighbours == outcomes[0].neighbours);
    CHECK(o.range_asked == outcomes[0].range_asked);
    CHECK(o.adaptive == outcomes[0].adaptive);
    merged.charged.insert(merged.charged.end(), o.charged.begin(), o.charged.end());
  }
  return merged;
}

}  // namespace

TEST_CASE("sharded queries equal the whole fleet's bit for bit on 1 to 4 shards",
          "[coordinator][shard]") {
  CGP_SEEDED(1301);
  const auto points = test::uniform_square(5000, 10000, seed);
  const Outcome whole = run_queries(points, 0, 5000, nullptr, seed);
  REQUIRE(whole.error.empty());
  REQUIRE(whole.range > 0);
  REQUIRE(whole.neighbours.size() == 20);
  REQUIRE(whole.range_asked.size() >= 2);  // elimination happened over several rounds
  for (std::size_t shards : {1, 2, 3, 4}) {
    INFO(shards << " shard(s)");
    const Outcome sharded = run_sharded(points, shards, seed);
    REQUIRE(sharded.error.empty());
    CHECK(sharded.range == whole.range);
    CHECK(sharded.range_asked == whole.range_asked);
    CHECK(sharded.range_eliminated == whole.range_eliminated);
    CHECK(sharded.kde == whole.kde);  // block-ordered sums: the same double
    CHECK(sharded.neighbours == whole.neighbours);
    CHECK(sharded.knn_asked == whole.knn_asked);
    CHECK(sharded.adaptive == whole.adaptive);
    CHECK(sharded.charged == whole.charged);
  }
}

TEST_CASE("shard slices are whole sum blocks, cover the fleet once and fit 32-bit ids",
          "[coordinator][shard]") {
  for (std::size_t n : {1ul, 255ul, 256ul, 5000ul, 1000003ul, 100000000ul, 4000000000ul}) {
    const std::size_t block = sum_block(n);
    CHECK(block >= 256);
    CHECK((n + block - 1) / block <= 1024);
    for (std::size_t count : {1ul, 2ul, 3ul, 4ul, 7ul}) {
      std::size_t next = 0;
      for (std::size_t s = 0; s < count; ++s) {
        const ShardSlice slice = shard_slice(n, s, count);
        CHECK(slice.first == next);
        if (slice.size > 0 && slice.first + slice.size < n) CHECK(slice.size % block == 0);
        next = slice.first + slice.size;
      }
      CHECK(next == n);
    }
  }
  CHECK(shard_slice(100, 3, 2).size == 0);  // past the shards
}

TEST_CASE("a shard whose query is invalid stops it on every shard without a hang",
          "[coordinator][shard]") {
  const auto points = test::uniform_square(2000, 10000, 7);
  ThreadShards group(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (std::size_t s = 0; s < 2; ++s)
      threads.emplace_back([&, s] {
        const ShardSlice slice = shard_slice(2000, s, 2);
        const std::vector<double> mine(
            points.begin() + static_cast<std::ptrdiff_t>(2 * slice.first),
            points.begin() + static_cast<std::ptrdiff_t>(2 * (slice.first + slice.size)));
        auto fleet = test::make_fleet(mine, 2, kBudget, 7, 1);
        BudgetMirror mirror(slice.size, kBudget);
        QueryOptions options;
        options.shard = {static_cast<UserId>(slice.first), 2000, &group.reducer(s)};
        // Shard 1 lists a user it does not hold.
        std::vector<UserId> users{0, 1};
        if (s == 1) users.push_back(static_cast<UserId>(slice.size + 5));
        const double p[2] = {100, 100};
        auto result =
            kde(fleet, mirror, p, 500, UserCharges::uniform(Charge{1e-3}, users), options);
        errors[s] = result ? "" : result.error().parameter;
      });
  }
  CHECK(errors[1] == "users");  // the shard with the bad id names it
  CHECK(errors[0] == "shard");  // the other learns that another shard failed
}

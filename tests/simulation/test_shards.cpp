// The shard-local engine (coordinator/shard.hpp) against the whole fleet in one process: the
// same queries over 1 to 4 shards — contiguous slices, block-aligned or not, and scattered sets
// of users in any order — each shard a thread with its own SimulatedFleet over its users
// (noise keyed by global ids) and its own budget mirror, meeting in a barrier-based reducer.
// Results must be bit-identical to the unsharded run. MPI runs the same engine across processes
// (tests/experiments/mpi_check.sh).
#include <algorithm>
#include <barrier>
#include <catch2/catch.hpp>
#include <deque>
#include <functional>
#include <random>
#include <thread>

#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/exact_sum.hpp"
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
  double range = 0;
  std::vector<double> kde;  // at several points and bandwidths, PM0 and PM1
  std::vector<std::size_t> range_asked, range_eliminated, knn_asked;
  std::vector<UserId> neighbours;
  std::vector<Charge> charged;   // range query: by local id on a shard, by global id merged
  std::vector<double> adaptive;  // Alg. 3 estimates
  std::string error;
};

constexpr double kBudget = 1.0;

// A shard's users: a contiguous range of global ids, or a list of them in any order.
struct Users {
  std::size_t first = 0, size = 0;  // contiguous: [first, first + size)
  std::vector<UserId> ids;          // listed (when not empty): local user u is ids[u]
  std::size_t count() const { return ids.empty() ? size : ids.size(); }
  UserId global(std::size_t u) const {
    return ids.empty() ? static_cast<UserId>(first + u) : ids[u];
  }
};

Users contiguous(std::size_t first, std::size_t size) {
  return {first, size, {}};
}

// The queries on one shard (or the whole fleet when reducer is null).
Outcome run_queries(const std::vector<double>& all_points, const Users& users,
                    ShardReducer* reducer, std::uint64_t seed) {
  Outcome out;
  const std::size_t n = all_points.size() / 2, size = users.count();
  std::vector<double> points;
  for (std::size_t u = 0; u < size; ++u)
    for (std::size_t a = 0; a < 2; ++a) points.push_back(all_points[2 * users.global(u) + a]);
  simulation::SimulatedFleetOptions fleet_options;
  fleet_options.threads = 1;
  fleet_options.first_user = users.ids.empty() ? static_cast<UserId>(users.first) : 0;
  fleet_options.user_ids = users.ids;
  fleet_options.borrow_points = true;  // `points` outlives the fleet
  auto fleet = simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points, 2, seed,
                                                  fleet_options);
  if (!fleet) return out.error = fleet.error().message, out;
  BudgetMirror mirror(size, kBudget);
  QueryOptions options;
  options.shard = {static_cast<UserId>(users.first), n, reducer, users.ids};
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

  // Several KDE queries: each total has one chance in a few to come out the same when rounded
  // in another order, so one query would not tell exact sums from lucky ones.
  for (int q = 0; q < 8; ++q) {
    const double at[2] = {2000.0 + 800 * q, 7000.0 - 600 * q};
    options.method = q % 2 ? Method::PM1 : Method::PM0;
    options.query_id = "kde-" + std::to_string(q);
    auto density = kde(*fleet, mirror, at, 300.0 + 100 * q, test::charge_everyone(1e-3), options);
    if (!density) return out.error = density.error().message, out;
    out.kde.push_back(density->estimate);
  }

  const double p[2] = {4000, 4000};

  // kNN over the users other than global id 17 (listed per shard by local id).
  std::vector<UserId> candidates;
  for (std::size_t u = 0; u < size; ++u)
    if (global_id(options.shard, static_cast<UserId>(u)) != 17)
      candidates.push_back(static_cast<UserId>(u));
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

// The queries over `shards`, one thread each; the shards' users together are the fleet.
Outcome run_sharded(const std::vector<double>& points, const std::vector<Users>& shards,
                    std::uint64_t seed) {
  const std::size_t n = points.size() / 2;
  ThreadShards group(shards.size());
  std::vector<Outcome> outcomes(shards.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t s = 0; s < shards.size(); ++s)
      threads.emplace_back(
          [&, s] { outcomes[s] = run_queries(points, shards[s], &group.reducer(s), seed); });
  }
  // Every shard holds the same global results; the per-user charges are each shard's own, put
  // back in global order.
  Outcome merged = outcomes[0];
  merged.charged.assign(n, Charge{-1.0});
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const Outcome& o = outcomes[s];
    if (!o.error.empty()) merged.error = o.error;
    CHECK(o.range == outcomes[0].range);
    CHECK(o.kde == outcomes[0].kde);
    CHECK(o.neighbours == outcomes[0].neighbours);
    CHECK(o.range_asked == outcomes[0].range_asked);
    CHECK(o.adaptive == outcomes[0].adaptive);
    REQUIRE(o.charged.size() == (o.error.empty() ? shards[s].count() : 0));
    for (std::size_t u = 0; u < o.charged.size(); ++u)
      merged.charged[shards[s].global(u)] = o.charged[u];
  }
  return merged;
}

std::vector<Users> slices(std::size_t n, std::size_t shards) {
  std::vector<Users> out;
  for (std::size_t s = 0; s < shards; ++s) {
    const ShardSlice slice = shard_slice(n, s, shards);
    out.push_back(contiguous(slice.first, slice.size));
  }
  return out;
}

// Every result of `sharded` equals the whole fleet's, bit for bit.
void check_same(const Outcome& sharded, const Outcome& whole) {
  REQUIRE(sharded.error.empty());
  CHECK(sharded.range == whole.range);
  CHECK(sharded.range_asked == whole.range_asked);
  CHECK(sharded.range_eliminated == whole.range_eliminated);
  CHECK(sharded.kde == whole.kde);  // exact sums rounded once: the same double
  CHECK(sharded.neighbours == whole.neighbours);
  CHECK(sharded.knn_asked == whole.knn_asked);
  CHECK(sharded.adaptive == whole.adaptive);
  CHECK(sharded.charged == whole.charged);
}

Outcome run_whole(const std::vector<double>& points, std::uint64_t seed) {
  Outcome whole = run_queries(points, contiguous(0, points.size() / 2), nullptr, seed);
  REQUIRE(whole.error.empty());
  REQUIRE(whole.range > 0);
  REQUIRE(whole.neighbours.size() == 20);
  REQUIRE(whole.range_asked.size() >= 2);  // elimination happened over several rounds
  return whole;
}

// Splitmix64: a seeded hash of a user's id, for scattered shards.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

TEST_CASE("sharded queries equal the whole fleet's bit for bit on 1 to 4 shards",
          "[coordinator][shard]") {
  CGP_SEEDED(1301);
  const auto points = test::uniform_square(5000, 10000, seed);
  const Outcome whole = run_whole(points, seed);
  for (std::size_t shards : {1, 2, 3, 4}) {
    INFO(shards << " shard(s)");
    check_same(run_sharded(points, slices(5000, shards), seed), whole);
  }
}

TEST_CASE("contiguous shards need not be whole blocks", "[coordinator][shard]") {
  CGP_SEEDED(1303);
  const auto points = test::uniform_square(5000, 10000, seed);
  const Outcome whole = run_whole(points, seed);
  // Boundaries off every block (sum_block(5000) = 256), and a shard of one user.
  const std::vector<Users> shards = {contiguous(0, 1234), contiguous(1234, 1),
                                     contiguous(1235, 1766), contiguous(3001, 1999)};
  for (const Users& users : shards)
    if (users.first > 0) CHECK(users.first % sum_block(5000) != 0);
  check_same(run_sharded(points, shards, seed), whole);
}

TEST_CASE("shards holding scattered users in any order equal the whole fleet bit for bit",
          "[coordinator][shard]") {
  CGP_SEEDED(1302);
  const std::size_t n = 5000;
  const auto points = test::uniform_square(n, 10000, seed);
  const Outcome whole = run_whole(points, seed);
  std::mt19937_64 rng(seed ^ 0x5851f42d4c957f2dULL);
  // User i on shard hash(seed, i) mod 3: no shard's ids are a range or aligned to blocks.
  std::vector<Users> scattered(3);
  for (std::size_t i = 0; i < n; ++i)
    scattered[mix(seed ^ mix(i)) % 3].ids.push_back(static_cast<UserId>(i));
  for (const Users& users : scattered) {
    REQUIRE(users.ids.size() > n / 4);
    CHECK(users.ids.back() - users.ids.front() + 1 > users.ids.size());  // not contiguous
  }
  SECTION("ids ascending") {
    check_same(run_sharded(points, scattered, seed), whole);
  }
  SECTION("ids in a random order on each shard") {
    for (Users& users : scattered) std::shuffle(users.ids.begin(), users.ids.end(), rng);
    check_same(run_sharded(points, scattered, seed), whole);
  }
  SECTION("one shard holding the whole fleet in a random order") {
    Users all;
    for (std::size_t i = 0; i < n; ++i) all.ids.push_back(static_cast<UserId>(i));
    std::shuffle(all.ids.begin(), all.ids.end(), rng);
    check_same(run_sharded(points, {all}, seed), whole);
  }
}

TEST_CASE("a sum over shards is the exact sum rounded once, for any split and order",
          "[coordinator][shard]") {
  CGP_SEEDED(1304);
  std::mt19937_64 rng(seed);
  int naive_differs = 0;  // the data tells exact sums from plain ones
  for (int trial = 0; trial < 20; ++trial) {
    INFO("trial " << trial);
    std::vector<double> values(1000);
    for (double& v : values)
      v = std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 120) - 110) *
          (rng() % 4 ? 1 : -1);
    ExactSum whole;
    double naive = 0;
    for (double v : values) whole.add(v), naive += v;
    naive_differs += naive != whole.value() ? 1 : 0;
    const std::size_t count = 1 + rng() % 5;
    std::vector<std::vector<double>> mine(count);
    for (std::size_t i = 0; i < values.size(); ++i)
      mine[mix(seed ^ mix(i + 1000 * static_cast<std::size_t>(trial))) % count].push_back(
          values[i]);
    for (auto& m : mine) std::shuffle(m.begin(), m.end(), rng);
    ThreadShards group(count);
    std::vector<double> totals(count);
    {
      std::vector<std::jthread> threads;
      for (std::size_t s = 0; s < count; ++s)
        threads.emplace_back([&, s] {
          const Shard shard{0, values.size(), &group.reducer(s)};
          ShardSum sum(shard);
          for (double v : mine[s]) sum.add(v);
          totals[s] = sum.total();
        });
    }
    for (double t : totals) CHECK(t == whole.value());
  }
  CHECK(naive_differs > 0);
}

TEST_CASE("shard slices are whole blocks, cover the fleet once and fit 32-bit ids",
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

TEST_CASE("a shard listing a global id past the fleet stops the query on every shard",
          "[coordinator][shard]") {
  const auto points = test::uniform_square(200, 10000, 7);
  ThreadShards group(2);
  std::vector<std::string> parameters(2), messages(2);
  {
    std::vector<std::jthread> threads;
    for (std::size_t s = 0; s < 2; ++s)
      threads.emplace_back([&, s] {
        // Shard s holds the users of parity s; shard 1 lists id 200 for its last (fleet: 200).
        std::vector<UserId> ids;
        for (UserId i = static_cast<UserId>(s); i < 200; i += 2) ids.push_back(i);
        if (s == 1) ids.back() = 200;
        std::vector<double> mine;
        for (UserId i : ids)
          mine.insert(mine.end(), {points[2 * (i % 200)], points[2 * (i % 200) + 1]});
        auto fleet = test::make_fleet(mine, 2, kBudget, 7, 1);
        BudgetMirror mirror(ids.size(), kBudget);
        QueryOptions options;
        options.shard = {0, 200, &group.reducer(s), ids};
        const double p[2] = {100, 100};
        auto result = kde(fleet, mirror, p, 500, test::charge_everyone(1e-3), options);
        if (result) return;  // no assertions off the test's thread: the checks below fail
        parameters[s] = result.error().parameter;
        messages[s] = result.error().message;
      });
  }
  CHECK(parameters == std::vector<std::string>{"shard", "shard"});
  CHECK_THAT(messages[1], Catch::Contains("global id 200"));  // its own error
  CHECK_THAT(messages[0], Catch::Contains("other shard"));    // told another shard failed
}

TEST_CASE("a simulated fleet takes one global id per user, in place of first_user",
          "[coordinator][shard]") {
  const auto points = test::uniform_square(3, 100, 1);
  const std::vector<UserId> two{4, 9};
  simulation::SimulatedFleetOptions options;
  options.threads = 1;
  options.user_ids = two;
  auto short_list =
      simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points, 2, 1, options);
  REQUIRE(!short_list);
  CHECK(short_list.error().parameter == "user_ids");
  const std::vector<UserId> three{4, 9, 2};
  options.user_ids = three;
  options.first_user = 10;
  auto both =
      simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points, 2, 1, options);
  REQUIRE(!both);
  CHECK(both.error().parameter == "first_user");
  options.first_user = 0;
  CHECK(simulation::SimulatedFleet::create(*DeviceConfig::cgp(kBudget), points, 2, 1, options)
            .has_value());
}

#include "cgp/simulation/simulated_fleet.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <optional>
#include <string>
#include <thread>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/parallel.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/coordinator/round_fold.hpp"
#include "fast_normals.hpp"
#include "mix64.hpp"

namespace cgp::simulation {

using namespace coordinator;
namespace {

// The noise stream of one round of one query: FNV-1a of the query id, mixed with the round.
std::uint64_t round_stream(const std::string& query_id, std::uint32_t round) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : query_id) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h ^ (static_cast<std::uint64_t>(round) << 32 | round));
}

// The noise key of the user of global id i, pair_bits(mix64(seed), i >> 1) << 1 | (i & 1): its
// noise in every round of a run derives from it (fast noise's counters, exact noise's
// generator seed). Partners (users 2m and 2m + 1) share bits 1–63 and bit 0 is
// the user's own: a 1-D fast release takes one half of the pair at the shared counter
// (normal_halves: partners side by side cost one pair), and a point's coordinates come from the
// user's own key at blocks 1, 2, ... (block 0 is the shared pair's). Bits 1–63 are SplitMix64's
// finalizer on 63 bits (xor-shifts and odd multipliers modulo 2^63 are bijections) of m under
// the seed: distinct pairs of one run never share a counter.
std::uint64_t pair_bits(std::uint64_t mixed_seed, UserId pair) {
  constexpr std::uint64_t k63 = (std::uint64_t{1} << 63) - 1;
  std::uint64_t v = (mixed_seed ^ pair) & k63;
  v = ((v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL) & k63;
  v = ((v ^ (v >> 27)) * 0x94d049bb133111ebULL) & k63;
  return v ^ (v >> 31);
}

// The key of the user of global id `id` under a seed whose mix64 is `mixed_seed`.
std::uint64_t user_key(std::uint64_t mixed_seed, UserId id) {
  return pair_bits(mixed_seed, id >> 1) << 1 | (id & 1);
}

// The keys of the consecutive global ids first, first + 1, ... into keys[0 .. count): one
// hash per pair of partners (an odd first has no partner here, nor an odd last).
void consecutive_user_keys(std::uint64_t mixed_seed, std::size_t count, UserId first,
                           std::uint64_t* keys) {
  std::size_t u = 0;
  if (count > 0 && first % 2 != 0) keys[u++] = user_key(mixed_seed, first);
  for (; u + 1 < count; u += 2) {
    const std::uint64_t bits = user_key(mixed_seed, first + static_cast<UserId>(u));
    keys[u] = bits;
    keys[u + 1] = bits | 1;
  }
  if (u < count) keys[u] = user_key(mixed_seed, first + static_cast<UserId>(u));
}

}  // namespace

namespace {

// Hashes a double by its bits (std::hash<double> goes through _Hash_bytes: slow per user).
struct DoubleBitsHash {
  std::size_t operator()(double v) const noexcept {
    return static_cast<std::size_t>(std::bit_cast<std::uint64_t>(v) * 0x9e3779b97f4a7c15ULL >> 17);
  }
};

// A device's plan with what a fast release reads of it (σ in grid units, 1/u and u), worked out
// once per ρ instead of once per release.
struct PlannedNoise {
  client::NoisePlan plan;
  double sigma_grid = 0, scale = 0, grid = 0;
  void set(const client::NoisePlan& made) {
    plan = made;
    sigma_grid = std::sqrt(static_cast<double>(made.sigma2_grid));
    scale = made.grid_scale();
    grid = made.grid();
  }
};

// The device's plans (plan_noise) by ρ, kept across rounds: a round asks most users the same ρ
// (computed once), Alg. 3 many distinct ones, the same in every round of a query. One per
// thread (plans depend on K, ρ and the capacity only, so fleets may share it), direct-mapped
// and allocation-free: a slot is overwritten by the next ρ that hashes to it, so a returned
// plan is valid until the next find — callers copy it.
class PlanCache {
 public:
  // The plan for a K-Lipschitz statistic at ρ; nullptr where plan_noise refuses. Callers keep
  // ρ ≤ 0 and NaN out.
  const PlannedNoise* find(double lipschitz, double rho, double capacity) {
    if (lipschitz != lipschitz_ || capacity != capacity_) {
      for (Slot& slot : slots_) slot.filled = false;
      lipschitz_ = lipschitz;
      capacity_ = capacity;
      auto planner = client::NoisePlanner::create(lipschitz, capacity);
      planner_ = planner ? std::optional(*planner) : std::nullopt;
    }
    Slot& slot = slots_[DoubleBitsHash{}(rho) & (kSlots - 1)];
    if (!slot.filled || slot.rho != rho) {
      // plan_noise(lipschitz, ρ, capacity), with its (K, capacity) part done once (no planner:
      // plan_noise refuses every ρ for this K and capacity).
      slot.filled = true;
      slot.rho = rho;
      slot.ok = false;
      if (planner_) {
        auto plan = planner_->plan(rho);
        slot.ok = plan.has_value();
        if (plan) slot.plan.set(*plan);
      }
    }
    return slot.ok ? &slot.plan : nullptr;
  }

 private:
  struct Slot {
    double rho = 0;
    bool filled = false, ok = false;
    PlannedNoise plan;
  };
  // Alg. 3 asks thousands of distinct ρ a round of 20,000 users; measured there (with the
  // per-user memo the per-class one replaced in front), 8,192 slots did as well as 16,384 or
  // 65,536, and better than 4,096.
  static constexpr std::size_t kSlots = 8192;  // a power of two: the slot is a mask, not a division
  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
  double lipschitz_ = 0, capacity_ = 0;
  std::optional<client::NoisePlanner> planner_;  // for (lipschitz_, capacity_), where valid
};

bool same_plan(const client::NoisePlan& a, const client::NoisePlan& b) noexcept {
  return a.grid_exponent == b.grid_exponent && a.sigma2_grid == b.sigma2_grid &&
         a.charged_rho == b.charged_rho && a.coordinate_limit == b.coordinate_limit;
}

// Users a thread takes through the fast round at once: the buffers stay in L1/L2 and the
// noise kernel runs over full vectors.
constexpr std::size_t kBatch = 256;

// Per thread, whoever calls (the engine asks chunks of a round concurrently).
PlanCache& thread_plans() {
  thread_local PlanCache plans;
  return plans;
}

// How many users ahead a folded round starts loading a user's state (RoundRunner::run_uniform):
// enough misses in flight to cover a memory latency at a few nanoseconds per user. Only in
// fleets whose state outgrows the caches (2^19 users and more: 30 MiB and up): measured, it
// costs ~7% on 200,000 users (KDE PM1) and gains ~28% on 10^6 (range PM1, 2 threads).
constexpr std::size_t kPrefetchAhead = 16;
constexpr std::size_t kPrefetchUsers = std::size_t{1} << 19;

// One thread's buffers for the fast round, reused across batches (no allocation per user; the
// per-user arrays are written by index, kBatch long).
struct FastBatch {
  std::size_t count = 0;  // users admitted in the batch so far
  std::vector<std::uint32_t> slot = std::vector<std::uint32_t>(kBatch);  // their positions
  std::vector<std::uint64_t> keys = std::vector<std::uint64_t>(kBatch);  // their noise keys
  // A folded round's admitted users: their ρ, known charge, charge and budget left.
  std::vector<double> rho = std::vector<double>(kBatch), known = std::vector<double>(kBatch),
                      charged = std::vector<double>(kBatch),
                      remaining = std::vector<double>(kBatch);
  // Runs of admitted users under one plan: users [run_begin[r], run_begin[r+1]) (the last run
  // to the end) release under run_plan[r] (copies: the cache may move on). Most batches are one
  // run: a round asks most users the same ρ.
  std::vector<std::uint32_t> run_begin;
  std::vector<PlannedNoise> run_plan;
  double run_rho = 0;  // the ρ of the last admitted user
  // Each admitted user's own plan values and input box (add()), so that a batch of short runs
  // (one plan per user, as Alg. 3 asks) is released without walking its runs.
  std::vector<double> sigma = std::vector<double>(kBatch), scale = std::vector<double>(kBatch),
                      grid = std::vector<double>(kBatch), limit = std::vector<double>(kBatch);
  std::vector<std::uint64_t> item_keys;    // noise keys per pair of normals
  std::vector<std::uint32_t> item_blocks;  // the pair's block in the user's stream
  std::vector<double> inputs, phi, pairs, normals, released;
  std::vector<double> item_sigma, item_scale, item_grid;  // each item's plan (short runs)

  // track_runs: add() keeps the runs, which release_fast needs for statistics of more than two
  // values; one or two values per user are released from each user's own plan values (the
  // same bits: privatize_normals_each), so those batches skip keeping a copy of every new plan
  // (Alg. 3 asks each user its own ρ: a run per user).
  bool track_runs = true;
  void clear(bool keep_runs) {
    count = 0;
    track_runs = keep_runs;
    run_begin.clear(), run_plan.clear();
  }
  // Slot k, admitted at ρ under `plan` with inputs clamped to ±input_limit, releases with noise
  // keyed by `key`: a new run where the plan changes (equal ρ: the same plan, without comparing
  // it). Returns its index.
  std::size_t add(std::size_t k, double asked_rho, const PlannedNoise& plan, double input_limit,
                  std::uint64_t key) {
    if (track_runs && (run_plan.empty() ||
                       (asked_rho != run_rho && !same_plan(plan.plan, run_plan.back().plan)))) {
      run_begin.push_back(static_cast<std::uint32_t>(count));
      run_plan.push_back(plan);
    }
    run_rho = asked_rho;
    slot[count] = static_cast<std::uint32_t>(k);
    keys[count] = key;
    sigma[count] = plan.sigma_grid;
    scale[count] = plan.scale;
    grid[count] = plan.grid;
    limit[count] = input_limit;
    return count++;
  }
};

FastBatch& thread_batch() {
  thread_local FastBatch batch;  // warm buffers across the chunks a thread is asked
  return batch;
}

// What a folded round reads of a class of ρ's plan (RoundFold::rho_classes: users of one class
// are asked the same ρ in a round), for rounds that ask users distinct ρ (Alg. 3): looked up in
// the thread's PlanCache once per class and query, then read by class. An entry says which ρ it
// was made for: an entry of another query or round for another ρ is a miss, and one for the
// same ρ is that ρ's plan (a plan depends on K, ρ and the capacity only, as PlanCache's); the
// table says which (K, capacity) its entries were made for, and is emptied when they change. One
// table per thread (chunks of a round run concurrently, and may share classes), grown to a
// query's classes.
struct ClassPlan {
  double rho = 0;   // 0: none yet
  bool ok = false;  // plan_noise made `planned` for ρ (else it refused ρ)
  PlannedNoise planned;
  void set(double class_rho, const PlannedNoise* made) {
    rho = class_rho;
    ok = made != nullptr;
    planned = made ? *made : PlannedNoise{};
  }
};

class ClassPlans {
 public:
  // The entries for (K, capacity): kept where they were made for the same, else emptied;
  // `classes` of them.
  ClassPlan* for_fleet(double lipschitz, double capacity, std::size_t classes) {
    if (lipschitz != lipschitz_ || capacity != capacity_) {
      std::fill(entries_.begin(), entries_.end(), ClassPlan{});
      lipschitz_ = lipschitz, capacity_ = capacity;
    }
    if (entries_.size() < classes) entries_.resize(classes);
    return entries_.data();
  }

 private:
  std::vector<ClassPlan> entries_;
  double lipschitz_ = 0, capacity_ = 0;
};

ClassPlans& thread_class_plans() {
  thread_local ClassPlans plans;
  return plans;
}

}  // namespace

std::string_view noise_name(SimulationNoise noise) noexcept {
  return noise == SimulationNoise::fast ? "fast" : "exact";
}

Expected<SimulationNoise> parse_noise(std::string_view name) {
  if (name == "fast") return SimulationNoise::fast;
  if (name == "exact") return SimulationNoise::exact;
  return make_error(ErrorCode::invalid_argument, "noise",
                    "noise must be fast or exact, got '" + std::string(name) + "'");
}

struct SimulatedFleet::State {
  DeviceConfig config;
  std::size_t dimension = 0;
  std::vector<double> owned_points;  // empty when the points are borrowed
  std::span<const double> points;
  // Each device's filter state as arrays (9 bytes a user); the rules are client::PrivacyFilter's,
  // applied to a filter built from them per user.
  std::vector<double> spent;
  std::vector<std::uint8_t> halted;
  std::uint64_t seed = 0;
  UserId first_user = 0;         // global id of user 0: noise keys are global
  std::vector<UserId> user_ids;  // or each user's global id (empty: first_user + u)
  UserId global_id(UserId user) const noexcept {
    return user_ids.empty() ? first_user + user : user_ids[user];
  }
  // Each user's noise key, user_key(mix64(seed), global id), kept for the run (8 bytes a user):
  // a round reads it instead of hashing twice per user.
  std::vector<std::uint64_t> keys;
  void rekey() {
    keys.resize(spent.size());
    const std::uint64_t mixed_seed = mix64(seed);
    if (user_ids.empty()) {
      consecutive_user_keys(mixed_seed, keys.size(), first_user, keys.data());
    } else {
      for (std::size_t u = 0; u < keys.size(); ++u) keys[u] = user_key(mixed_seed, user_ids[u]);
    }
  }
  unsigned threads = 1;
  SimulationNoise noise = SimulationNoise::fast;
  std::atomic<std::uint64_t> released{0};  // one add per batch
};

SimulatedFleet::SimulatedFleet(std::unique_ptr<State> state) : state_(std::move(state)) {}
SimulatedFleet::SimulatedFleet(SimulatedFleet&&) noexcept = default;
SimulatedFleet& SimulatedFleet::operator=(SimulatedFleet&&) noexcept = default;
SimulatedFleet::~SimulatedFleet() = default;

Expected<SimulatedFleet> SimulatedFleet::create(const DeviceConfig& config,
                                                std::span<const double> points,
                                                std::size_t dimension, std::uint64_t seed,
                                                unsigned threads, SimulationNoise noise) {
  return create(config, points, dimension, seed, SimulatedFleetOptions{threads, noise});
}

Expected<SimulatedFleet> SimulatedFleet::create(const DeviceConfig& config,
                                                std::span<const double> points,
                                                std::size_t dimension, std::uint64_t seed,
                                                const SimulatedFleetOptions& options) {
  CGP_RETURN_IF_ERROR(validate_fleet_points(points, dimension));
  if (std::uint64_t{options.first_user} + points.size() / dimension > (std::uint64_t{1} << 32))
    return make_error(ErrorCode::out_of_range, "first_user",
                      "the fleet's global ids must fit a UserId (32 bits)");
  if (!options.user_ids.empty() && options.user_ids.size() != points.size() / dimension)
    return make_error(ErrorCode::dimension_mismatch, "user_ids",
                      "user_ids has " + std::to_string(options.user_ids.size()) +
                          " ids for a fleet of " + std::to_string(points.size() / dimension));
  if (!options.user_ids.empty() && options.first_user != 0)
    return make_error(ErrorCode::invalid_argument, "first_user",
                      "first_user and user_ids both give global ids: set one");
  auto state = std::make_unique<State>();
  state->config = config;
  state->dimension = dimension;
  if (options.borrow_points) {
    state->points = points;
  } else {
    state->owned_points.assign(points.begin(), points.end());
    state->points = state->owned_points;  // the State never moves: the view stays valid
  }
  state->spent.assign(points.size() / dimension, 0.0);
  state->halted.assign(points.size() / dimension, 0);
  state->seed = seed;
  state->first_user = options.first_user;
  state->user_ids.assign(options.user_ids.begin(), options.user_ids.end());
  state->rekey();
  state->threads = options.threads ? options.threads : default_threads();
  state->noise = options.noise;
  return SimulatedFleet(std::move(state));
}

std::size_t SimulatedFleet::size() const noexcept {
  return state_->spent.size();
}
std::size_t SimulatedFleet::dimension() const noexcept {
  return state_->dimension;
}
double SimulatedFleet::initial_budget() const noexcept {
  return state_->config.rho_capacity();
}
double SimulatedFleet::spent(UserId user) const noexcept {
  return state_->spent[user];
}
unsigned SimulatedFleet::threads() const noexcept {
  return state_->threads;
}
std::uint64_t SimulatedFleet::values_released() const noexcept {
  return state_->released.load(std::memory_order_relaxed);
}
unsigned SimulatedFleet::concurrency() const noexcept {
  return state_->threads;
}
SimulationNoise SimulatedFleet::noise() const noexcept {
  return state_->noise;
}
std::span<const double> SimulatedFleet::location(UserId user) const noexcept {
  return {state_->points.data() + static_cast<std::size_t>(user) * state_->dimension,
          state_->dimension};
}

void SimulatedFleet::reset(std::uint64_t seed, const DeviceConfig& config) {
  state_->config = config;
  reset(seed);
}

void SimulatedFleet::reset(std::uint64_t seed) {
  std::fill(state_->spent.begin(), state_->spent.end(), 0.0);
  std::fill(state_->halted.begin(), state_->halted.end(), std::uint8_t{0});
  state_->seed = seed;
  state_->rekey();
}

// One round of SimulatedFleet::ask over slots [begin, end) of the request, or one chunk of a
// folded round (SimulatedFleet::ask_folded).
class RoundRunner {
 public:
  // out: the round's replies, or null for a folded round (no reply arrays).
  RoundRunner(SimulatedFleet::State& state, const RoundRequest& round, RoundReplies* out)
      : s(state), request(round), replies(out) {
    spec.kind = request.statistic;
    spec.point = request.point;
    spec.region = request.region;
    out_dim = spec.output_dimension(s.dimension);
    if (replies) replies->resize(request.users.size(), out_dim);
    // Requests that no device of this fleet could evaluate are rejected as a whole.
    const std::size_t required = spec.required_dimension();
    fits = (required == 0 || required == s.dimension) &&
           (spec.kind != StatisticKind::signed_distance_to_region || spec.region) &&
           (!replies || request.rho.size() == request.users.size());
    stream = round_stream(request.query_id, request.round);
    lipschitz = lipschitz_constant(spec.kind);
    extent = spec.public_extent();
  }

  void run(std::size_t begin, std::size_t end, PlanCache& cache) {
    RecentPlan plans{cache};
    if (s.noise == SimulationNoise::exact) {
      client::ReleaseScratch scratch;
      std::vector<double> out;
      for (std::size_t k = begin; k < end; ++k) {
        const PlannedNoise* plan = admit_slot(k, plans);
        if (!plan) continue;
        const UserId user = request.users[k];
        client::SimulationRandom random(s.keys[user], stream);
        client::RandomBits bits(random);
        // Cannot fail: plan_release made the plan and the request fits the fleet's dimension.
        (void)client::release_statistic(spec, location(user), plan->plan, bits, scratch, out);
        s.released.fetch_add(out.size(), std::memory_order_relaxed);
        std::copy(out.begin(), out.end(),
                  replies->values.begin() + static_cast<std::ptrdiff_t>(k * out_dim));
      }
      return;
    }
    FastBatch& b = thread_batch();
    for (std::size_t first = begin; first < end; first += kBatch) {
      const std::size_t last = std::min(end, first + kBatch);
      b.clear(out_dim > 2);
      for (std::size_t k = first; k < last; ++k) {
        const PlannedNoise* plan = admit_slot(k, plans);
        if (plan)
          b.add(k, request.rho[k], *plan, client::input_limit(spec, plan->plan),
                s.keys[request.users[k]]);
      }
      // When every slot of the batch was admitted, the releases go straight to the replies
      // (slot first + j); otherwise through a buffer to their slots.
      const std::size_t m = b.count;
      if (m == last - first) {
        release_fast(b, replies->values.data() + first * out_dim);
      } else if (m > 0) {
        const double* released = release_fast(b, nullptr);
        for (std::size_t j = 0; j < m; ++j)
          std::copy_n(released + j * out_dim, out_dim,
                      replies->values.data() + static_cast<std::size_t>(b.slot[j]) * out_dim);
      }
    }
  }

  // The folded chunk (every slot of the request): per batch, the mirror's check and the
  // device's admission user by user, the releases of the admitted ones over the batch, then the
  // engine's reading of each (RoundFold), in the order of the users.
  void run_folded(RoundFold& fold, PlanCache& cache) {
    RecentPlan plans{cache};
    double uniform_rho;
    Charge uniform_known;
    if (fits && fold.uniform_request(uniform_rho, uniform_known)) {
      const PlannedNoise* plan = cache.find(lipschitz, uniform_rho, s.config.rho_capacity());
      if (plan && client::plan_covers(plan->plan, extent))
        return run_uniform(fold, uniform_rho, uniform_known, *plan);
    }
    // Users asked distinct ρ, by class (Alg. 3), one or two values each or pairs of them.
    if (fits && fold.rho_classes() > 0 && (out_dim == 1 || out_dim % 2 == 0))
      return run_classes(fold, cache);
    FastBatch& b = thread_batch();
    const std::size_t end = request.users.size();
    for (std::size_t first = 0; first < end; first += kBatch) {
      const std::size_t last = std::min(end, first + kBatch);
      b.clear(out_dim > 2);
      for (std::size_t k = first; k < last; ++k) {
        const UserId user = request.users[k];
        double rho;
        Charge known;
        if (!fold.ask(user, rho, known)) continue;
        const Admission a = admit(user, rho, plans);
        if (a.kind != ReplyKind::answered) {
          fold.fold(user, rho, a.kind, known, Charge{}, a.remaining, nullptr);
          continue;
        }
        const std::size_t j =
            b.add(k, rho, *a.plan, client::input_limit(spec, a.plan->plan), s.keys[user]);
        b.rho[j] = rho;
        b.known[j] = known.value();
        b.charged[j] = a.plan->plan.charged_rho;
        b.remaining[j] = a.remaining;
      }
      const std::size_t m = b.count;
      if (m == 0) continue;
      const double* released = release_fast(b, nullptr);
      fold.fold_answers_each(m, request.users.data(), b.slot.data(), b.rho.data(), b.known.data(),
                             b.charged.data(), b.remaining.data(), released);
    }
  }

 private:
  // run_folded when users are asked distinct ρ by class (Alg. 3), for one or two values a user
  // or pairs of them: per batch, the mirror's check and the device's admission user by user
  // (admit's rules, with the class's plan looked up once per query), each admitted user's
  // component clamped to its plan's box as it is admitted, the releases over the batch, then
  // the engine's reading of the answers in one loop (RoundFold::fold_answers_each).
  void run_classes(RoundFold& fold, PlanCache& cache) {
    FastBatch& b = thread_batch();
    const std::size_t d = s.dimension, end = request.users.size(), users = s.spent.size();
    const DeviceConfig config = s.config;
    const double capacity = config.rho_capacity();
    ClassPlan* const class_plans =
        thread_class_plans().for_fleet(lipschitz, capacity, fold.rho_classes());
    b.inputs.resize(kBatch * d);
    const UserId* const asked_users = request.users.data();
    const double* const points = s.points.data();
    const std::uint64_t* const keys = s.keys.data();
    double* const spent = s.spent.data();
    std::uint8_t* const halted = s.halted.data();
    double* const inputs = b.inputs.data();
    for (std::size_t first = 0; first < end; first += kBatch) {
      const std::size_t last = std::min(end, first + kBatch);
      b.clear(false);
      std::size_t m = 0;
      for (std::size_t k = first; k < last; ++k) {
        const UserId user = asked_users[k];
        double rho;
        Charge known;
        if (!fold.ask(user, rho, known)) continue;
        if (user >= users) {  // no such device here: rejected, as admit() does
          fold.fold(user, rho, ReplyKind::rejected, known, Charge{}, 0, nullptr);
          continue;
        }
        ClassPlan& entry = class_plans[fold.rho_class(user)];
        if (entry.rho != rho) entry.set(rho, cache.find(lipschitz, rho, capacity));
        const PlannedNoise& plan = entry.planned;
        if (!entry.ok || !client::plan_covers(plan.plan, extent)) {  // plan_release refuses ρ
          const double left =
              client::PrivacyFilter(config, spent[user], halted[user] != 0).remaining();
          fold.fold(user, rho, ReplyKind::rejected, known, Charge{}, left, nullptr);
          continue;
        }
        const double charge = plan.plan.charged_rho;
        const Admission a = filter_charge(config, charge, spent[user], halted[user]);
        if (a.kind != ReplyKind::answered) {
          fold.fold(user, rho, a.kind, known, Charge{}, a.remaining, nullptr);
          continue;
        }
        b.slot[m] = static_cast<std::uint32_t>(k);
        b.keys[m] = keys[user];
        b.rho[m] = rho;
        b.known[m] = known.value();
        b.charged[m] = charge;
        b.remaining[m] = a.remaining;
        b.sigma[m] = plan.sigma_grid;
        b.scale[m] = plan.scale;
        b.grid[m] = plan.grid;
        const double limit = client::input_limit(spec, plan.plan);
        clamp_component(points + static_cast<std::size_t>(user) * d, d, limit, inputs + m * d);
        ++m;
      }
      b.count = m;
      if (m == 0) continue;
      const double* released = release_fast(b, nullptr, /*inputs_ready=*/true);
      fold.fold_answers_each(m, asked_users, b.slot.data(), b.rho.data(), b.known.data(),
                             b.charged.data(), b.remaining.data(), released);
    }
  }

  // run_folded when every user is asked the same ρ under one plan: per batch, the mirror's
  // check and the device's filter user by user (PrivacyFilter, as admit()), the releases over
  // the batch, then the engine's reading of the answers in one loop (RoundFold::fold_answers).
  void run_uniform(RoundFold& fold, double rho, Charge known, const PlannedNoise& planned) {
    const client::NoisePlan& plan = planned.plan;
    FastBatch& b = thread_batch();
    const std::size_t d = s.dimension, end = request.users.size(), users = s.spent.size();
    const bool prefetch = users >= kPrefetchUsers;
    b.inputs.resize(kBatch * d);
    // The loop's state in locals and raw pointers: its stores of doubles cannot then alias
    // (and reload) the configuration or the arrays' addresses.
    const DeviceConfig config = s.config;
    const double charge = plan.charged_rho, limit = client::input_limit(spec, plan);
    const UserId* const asked_users = request.users.data();
    const double* const points = s.points.data();
    const std::uint64_t* const keys = s.keys.data();
    double* const spent = s.spent.data();
    std::uint8_t* const halted = s.halted.data();
    std::uint32_t* const slot = b.slot.data();
    std::uint64_t* const batch_keys = b.keys.data();
    double* const remaining = b.remaining.data();
    double* const inputs = b.inputs.data();
    FilterMemo filter_memo;  // the round's one charge
    for (std::size_t first = 0; first < end; first += kBatch) {
      const std::size_t last = std::min(end, first + kBatch);
      b.clear(true);
      b.run_begin.push_back(0);
      b.run_plan.push_back(planned);
      std::size_t asked = 0, m = 0;
      for (std::size_t k = first; k < last; ++k) {
        if (prefetch && k + kPrefetchAhead < end) {
          const UserId ahead = asked_users[k + kPrefetchAhead];
          if (ahead < users) {
            __builtin_prefetch(points + static_cast<std::size_t>(ahead) * d);
            __builtin_prefetch(spent + ahead, 1);
            __builtin_prefetch(halted + ahead, 1);
            __builtin_prefetch(keys + ahead);
            fold.prefetch(ahead);
          }
        }
        const UserId user = asked_users[k];
        if (!fold.mirror_admits(user, known)) continue;
        ++asked;
        if (user >= users) {  // no such device here: rejected, as admit() does
          fold.fold(user, rho, ReplyKind::rejected, known, Charge{}, 0, nullptr);
          continue;
        }
        const Admission a = filter_charge(config, charge, spent[user], halted[user], filter_memo);
        if (a.kind != ReplyKind::answered) {
          fold.fold(user, rho, a.kind, known, Charge{}, a.remaining, nullptr);
          continue;
        }
        slot[m] = static_cast<std::uint32_t>(k);
        batch_keys[m] = keys[user];
        remaining[m] = a.remaining;
        clamp_component(points + static_cast<std::size_t>(user) * d, d, limit, inputs + m * d);
        ++m;
      }
      b.count = m;
      fold.count_asked(asked);
      if (m == 0) continue;
      const double* released = release_fast(b, nullptr, /*inputs_ready=*/true);
      fold.fold_answers(m, asked_users, slot, rho, known, Charge{charge}, remaining, released);
    }
  }

  // release_input's clamp of a component x (d values) to the plan's box, into `in` (2-D
  // unrolled).
  [[gnu::always_inline]] static void clamp_component(const double* x, std::size_t d, double limit,
                                                     double* in) {
    if (d == 2) {
      in[0] = std::clamp(x[0], -limit, limit);
      in[1] = std::clamp(x[1], -limit, limit);
      return;
    }
    for (std::size_t t = 0; t < d; ++t) in[t] = std::clamp(x[t], -limit, limit);
  }

  std::span<const double> location(UserId user) const {
    return {s.points.data() + static_cast<std::size_t>(user) * s.dimension, s.dimension};
  }

  // The plan of the last ρ looked up, in front of the thread's cache: most rounds ask every user
  // the same ρ, so the lookup (a hash and a compare of the slot) is done once per run of equal ρ.
  // `plan` stays valid until the next cache.find, which only `admit` calls.
  struct RecentPlan {
    PlanCache& cache;
    double rho = 0;  // no plan yet: callers never look up ρ ≤ 0
    const PlannedNoise* plan = nullptr;
    bool covered = false;  // plan && plan_covers(*plan, extent)
  };

  // A device's decision on one request.
  struct Admission {
    ReplyKind kind = ReplyKind::rejected;
    double remaining = 0;                // its budget left (0 for a request it does not look at)
    const PlannedNoise* plan = nullptr;  // answered: charged plan->plan.charged_rho
  };

  // Admission and charge of a request at ρ to `user`, the device's own rules (plan_release,
  // PrivacyFilter); an admitted charge is committed before anything is released.
  [[gnu::always_inline]] Admission admit(UserId user, double rho, RecentPlan& plans) {
    Admission a;
    // A request this fleet cannot evaluate, and ρ ≤ 0 or NaN: a device rejects the request
    // itself and says nothing about its budget.
    if (!fits || user >= s.spent.size() || !(rho > 0)) return a;
    // plan_release, in two steps so that plan_noise's work is kept across rounds.
    if (rho != plans.rho) {
      plans.rho = rho;
      plans.plan = plans.cache.find(lipschitz, rho, s.config.rho_capacity());
      plans.covered = plans.plan && client::plan_covers(plans.plan->plan, extent);
    }
    if (!plans.covered) {  // a ρ plan_release refuses
      a.remaining = client::PrivacyFilter(s.config, s.spent[user], s.halted[user] != 0).remaining();
      return a;
    }
    a = filter_charge(s.config, plans.plan->plan.charged_rho, s.spent[user], s.halted[user]);
    if (a.kind == ReplyKind::answered) a.plan = plans.plan;
    return a;
  }

  // The device's filter on a planned charge, for the user whose filter state is (spent,
  // halted): answered (the charge committed first, as on the device) or refused (a sticky
  // filter halts), with the budget left either way.
  [[gnu::always_inline]] static Admission filter_charge(const DeviceConfig& config, double charge,
                                                        double& spent, std::uint8_t& halted) {
    Admission a;
    client::PrivacyFilter filter(config, spent, halted != 0);
    if (!client::admit_or_halt(filter, charge, [&] { halted = 1; })) {
      a.kind = ReplyKind::refused;
    } else {
      filter.commit(charge);  // charged before anything is released, as on the device
      spent = filter.spent();
      a.kind = ReplyKind::answered;
    }
    a.remaining = filter.remaining();
    return a;
  }

  // filter_charge for users asked one charge: its outcome depends on the user's filter state
  // alone, so `memo` keeps the last unhalted user's, and users in that state (every user of a
  // fresh fleet, then those that answered alike) share it. One memo per charge.
  struct FilterMemo {
    std::uint64_t spent_bits = 0;
    bool valid = false;
    Admission admission;
    double spent_after = 0;
    std::uint8_t halted_after = 0;
  };
  [[gnu::always_inline]] static Admission filter_charge(const DeviceConfig& config, double charge,
                                                        double& spent, std::uint8_t& halted,
                                                        FilterMemo& memo) {
    Admission a;
    const auto spent_bits = std::bit_cast<std::uint64_t>(spent);
    if (halted == 0 && memo.valid && spent_bits == memo.spent_bits) {
      a = memo.admission;
      spent = memo.spent_after;
      halted = memo.halted_after;
    } else {
      const bool unhalted = halted == 0;
      a = filter_charge(config, charge, spent, halted);
      if (unhalted) memo = {spent_bits, true, a, spent, halted};
    }
    return a;
  }

  // admit() for slot k of the round's replies: the plan when the release goes ahead, nullptr
  // otherwise, the reply filled in either way (but for the values).
  [[gnu::always_inline]] const PlannedNoise* admit_slot(std::size_t k, RecentPlan& plans) {
    const Admission a = admit(request.users[k], fits ? request.rho[k] : 0, plans);
    replies->kind[k] = a.kind;
    replies->remaining[k] = a.remaining;
    if (a.plan) replies->charged[k] = Charge{a.plan->plan.charged_rho};
    return a.plan;
  }

  // Releases the admitted slots of a batch (b.slot) into `out` (m × out_dim values), or into
  // the batch's own buffer when out is null; returns where they went.
  // inputs_ready: b.inputs already holds the admitted users' clamped components.
  double* release_fast(FastBatch& b, double* out, bool inputs_ready = false) {
    const std::size_t m = b.count, d = s.dimension;
    s.released.fetch_add(m * out_dim, std::memory_order_relaxed);
    const std::size_t runs = b.run_plan.size();
    const auto run_end = [&](std::size_t r) { return r + 1 < runs ? b.run_begin[r + 1] : m; };
    // The device's input: its component clamped to the plan's box, then φ (release_input).
    // Users added one by one (add(): b.limit) unless the caller clamped them already.
    if (!inputs_ready) {
      b.inputs.resize(m * d);
      for (std::size_t j = 0; j < m; ++j)
        clamp_component(s.points.data() + static_cast<std::size_t>(request.users[b.slot[j]]) * d, d,
                        b.limit[j], b.inputs.data() + j * d);
    }
    const double* phi = b.inputs.data();
    if (spec.kind != StatisticKind::location) {
      b.phi.resize(m * out_dim);
      client::evaluate_unchecked(spec, b.inputs.data(), m, d, b.phi.data());
      phi = b.phi.data();
    }
    // out_dim standard normals per user: one half of the pair it shares with its partner when
    // out_dim is 1 (user_key), else the pairs at blocks 1, 2, ... of its own key.
    double* released = out ? out : (b.released.resize(m * out_dim), b.released.data());
    const std::size_t blocks = (out_dim + 1) / 2;
    if (out_dim > 1) {
      b.item_keys.resize(m * blocks);
      b.item_blocks.resize(m * blocks);
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t t = 0; t < blocks; ++t) {
          b.item_keys[j * blocks + t] = b.keys[j];
          b.item_blocks[j * blocks + t] = static_cast<std::uint32_t>(t + 1);  // user_key
        }
    }
    // Normals and the device's grid in one pass, run by run (privatize_normals: the same values
    // as normal_pairs then privatize_with_normals), where runs are long enough to fill vectors
    // (one plan per user, as Alg. 3 asks, would leave most lanes idle).
    // No runs kept (FastBatch::track_runs): each user's own values, below.
    if ((out_dim == 1 || out_dim % 2 == 0) && runs > 0 && (runs == 1 || runs * 16 <= m)) {
      for (std::size_t r = 0; r < runs; ++r) {
        const PlannedNoise& plan = b.run_plan[r];
        const std::size_t first = b.run_begin[r], users = run_end(r) - first;
        if (out_dim == 1)
          privatize_normal_halves(stream, b.keys.data() + first, users, phi + first,
                                  plan.sigma_grid, plan.scale, plan.grid, released + first);
        else
          privatize_normals(stream, b.item_keys.data() + first * blocks,
                            b.item_blocks.data() + first * blocks, users * blocks, true,
                            phi + first * out_dim, plan.sigma_grid, plan.scale, plan.grid,
                            released + first * out_dim);
      }
      return released;
    }
    // Short runs (one plan per user, as Alg. 3 asks): the same pass with each item's own plan.
    if (out_dim == 1 || out_dim % 2 == 0) {
      // Runs of more than one (only add() makes them) wrote each user's plan values: one item
      // per user (a value, or a pair for 2-D points) reads them; longer points repeat them per
      // pair.
      const std::size_t items = out_dim == 1 ? m : m * blocks;
      const double *sigma = b.sigma.data(), *scale = b.scale.data(), *grid = b.grid.data();
      if (blocks > 1) {
        b.item_sigma.resize(items), b.item_scale.resize(items), b.item_grid.resize(items);
        for (std::size_t t = 0; t < items; ++t) {
          b.item_sigma[t] = b.sigma[t / blocks];
          b.item_scale[t] = b.scale[t / blocks];
          b.item_grid[t] = b.grid[t / blocks];
        }
        sigma = b.item_sigma.data(), scale = b.item_scale.data(), grid = b.item_grid.data();
      }
      if (out_dim == 1)
        privatize_normal_halves_each(stream, b.keys.data(), items, phi, sigma, scale, grid,
                                     released);
      else
        privatize_normals_each(stream, b.item_keys.data(), b.item_blocks.data(), items, true, phi,
                               sigma, scale, grid, released);
      return released;
    }
    // The batch's normals, then the grid run by run (pairs, the last one cut).
    b.normals.resize(m * out_dim);
    b.pairs.resize(m * 2 * blocks);
    normal_pairs(stream, b.item_keys.data(), b.item_blocks.data(), m * blocks, b.pairs.data(),
                 true);
    for (std::size_t j = 0; j < m; ++j)
      std::copy_n(b.pairs.data() + j * 2 * blocks, out_dim, b.normals.data() + j * out_dim);
    for (std::size_t r = 0; r < runs; ++r) {
      const std::size_t from = b.run_begin[r] * out_dim,
                        count = (run_end(r) - b.run_begin[r]) * out_dim;
      client::privatize_with_normals({phi + from, count}, b.run_plan[r].plan,
                                     {b.normals.data() + from, count}, {released + from, count});
    }
    return released;
  }

  SimulatedFleet::State& s;
  const RoundRequest& request;
  RoundReplies* replies;
  client::StatisticSpec spec;
  std::size_t out_dim = 0;
  bool fits = false;
  std::uint64_t stream = 0;
  double lipschitz = 1, extent = 0;
};

void SimulatedFleet::ask(const RoundRequest& request, RoundReplies& replies) {
  RoundRunner round(*state_, request, &replies);
  parallel_chunks(
      request.users.size(), state_->threads,
      [&](std::size_t begin, std::size_t end, unsigned) { round.run(begin, end, thread_plans()); });
}

bool SimulatedFleet::ask_folded(const RoundRequest& request, RoundFold& fold) {
  if (state_->noise != SimulationNoise::fast || fold.round().decision == Decision::custom)
    return false;
  RoundRunner(*state_, request, nullptr).run_folded(fold, thread_plans());
  return true;
}

}  // namespace cgp::simulation

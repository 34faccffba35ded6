#include "cgp/simulation/simulated_fleet.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <string>
#include <thread>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/parallel.hpp"
#include "cgp/common/validate.hpp"
#include "fast_normals.hpp"

namespace cgp::simulation {

using namespace coordinator;
namespace {

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The noise stream of one round of one query: FNV-1a of the query id, mixed with the round.
std::uint64_t round_stream(const std::string& query_id, std::uint32_t round) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : query_id) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h ^ (static_cast<std::uint64_t>(round) << 32 | round));
}

// User i's key: its noise in every round of a run derives from it.
std::uint64_t user_key(std::uint64_t seed, UserId user) {
  return mix64(seed ^ mix64(user + 0x9e3779b97f4a7c15ULL));
}

}  // namespace

namespace {

// Hashes a double by its bits (std::hash<double> goes through _Hash_bytes: slow per user).
struct DoubleBitsHash {
  std::size_t operator()(double v) const noexcept {
    return static_cast<std::size_t>(std::bit_cast<std::uint64_t>(v) * 0x9e3779b97f4a7c15ULL >> 17);
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
  const client::NoisePlan* find(double lipschitz, double rho, double capacity) {
    if (lipschitz != lipschitz_ || capacity != capacity_) {
      for (Slot& slot : slots_) slot.filled = false;
      lipschitz_ = lipschitz;
      capacity_ = capacity;
    }
    Slot& slot = slots_[DoubleBitsHash{}(rho) % slots_.size()];
    if (!slot.filled || slot.rho != rho) {
      auto plan = client::plan_noise(lipschitz, rho, capacity);
      slot.filled = true;
      slot.rho = rho;
      slot.ok = plan.has_value();
      if (plan) slot.plan = *plan;
    }
    return slot.ok ? &slot.plan : nullptr;
  }

 private:
  struct Slot {
    double rho = 0;
    bool filled = false, ok = false;
    client::NoisePlan plan;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(4096);
  double lipschitz_ = 0, capacity_ = 0;
};

bool same_plan(const client::NoisePlan& a, const client::NoisePlan& b) noexcept {
  return a.grid_exponent == b.grid_exponent && a.sigma2_grid == b.sigma2_grid &&
         a.charged_rho == b.charged_rho && a.coordinate_limit == b.coordinate_limit;
}

// Users a thread takes through the fast round at once: the buffers stay in L1/L2 and the
// noise kernel runs over full vectors.
constexpr std::size_t kBatch = 256;

// One thread's buffers for the fast round, reused across batches (no allocation per user).
struct FastBatch {
  std::vector<std::uint32_t> slot;  // the admitted users' positions in the round
  // Runs of admitted users under one plan: users [run_begin[r], run_begin[r+1]) (the last run
  // to the end) release under run_plan[r] (copies: the cache may move on). Most batches are one
  // run: a round asks most users the same ρ.
  std::vector<std::uint32_t> run_begin;
  std::vector<client::NoisePlan> run_plan;
  double run_rho = 0;                          // the ρ of the last admitted user
  std::vector<std::uint64_t> keys, item_keys;  // noise keys: per user, per pair of normals
  std::vector<std::uint32_t> item_blocks;      // the pair's block in the user's stream
  std::vector<double> inputs, phi, pairs, normals, released;
};

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
}

// One round of SimulatedFleet::ask over slots [begin, end) of the request.
class RoundRunner {
 public:
  RoundRunner(SimulatedFleet::State& state, const RoundRequest& round, RoundReplies& out)
      : s(state), request(round), replies(out) {
    spec.kind = request.statistic;
    spec.point = request.point;
    spec.region = request.region;
    out_dim = spec.output_dimension(s.dimension);
    replies.resize(request.users.size(), out_dim);
    // Requests that no device of this fleet could evaluate are rejected as a whole.
    const std::size_t required = spec.required_dimension();
    fits = (required == 0 || required == s.dimension) &&
           (spec.kind != StatisticKind::signed_distance_to_region || spec.region) &&
           request.rho.size() == request.users.size();
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
        const client::NoisePlan* plan = admit(k, plans);
        if (!plan) continue;
        const UserId user = request.users[k];
        client::SimulationRandom random(user_key(s.seed, s.global_id(user)), stream);
        client::RandomBits bits(random);
        // Cannot fail: plan_release made the plan and the request fits the fleet's dimension.
        (void)client::release_statistic(spec, location(user), *plan, bits, scratch, out);
        s.released.fetch_add(out.size(), std::memory_order_relaxed);
        std::copy(out.begin(), out.end(),
                  replies.values.begin() + static_cast<std::ptrdiff_t>(k * out_dim));
      }
      return;
    }
    thread_local FastBatch b;  // warm buffers across the chunks a thread is asked
    for (std::size_t first = begin; first < end; first += kBatch) {
      const std::size_t last = std::min(end, first + kBatch);
      b.slot.clear();
      b.keys.clear();
      b.run_begin.clear();
      b.run_plan.clear();
      for (std::size_t k = first; k < last; ++k) {
        const client::NoisePlan* plan = admit(k, plans);
        if (!plan) continue;
        // A new run where the plan changes (equal ρ: the same plan, without comparing it).
        if (b.run_plan.empty() ||
            (request.rho[k] != b.run_rho && !same_plan(*plan, b.run_plan.back()))) {
          b.run_begin.push_back(static_cast<std::uint32_t>(b.slot.size()));
          b.run_plan.push_back(*plan);
        }
        b.run_rho = request.rho[k];
        b.slot.push_back(static_cast<std::uint32_t>(k));
        b.keys.push_back(user_key(s.seed, s.global_id(request.users[k])));
      }
      release_fast(b, first, last);
    }
  }

 private:
  std::span<const double> location(UserId user) const {
    return {s.points.data() + static_cast<std::size_t>(user) * s.dimension, s.dimension};
  }

  // The plan of the last ρ looked up, in front of the thread's cache: most rounds ask every user
  // the same ρ, so the lookup (a hash and a compare of the slot) is done once per run of equal ρ.
  // `plan` stays valid until the next cache.find, which only `find` calls.
  struct RecentPlan {
    PlanCache& cache;
    double rho = 0;  // no plan yet: callers never look up ρ ≤ 0
    const client::NoisePlan* plan = nullptr;
    bool covered = false;  // plan && plan_covers(*plan, extent)
  };

  // Admission and charge for slot k, the device's own rules (plan_release, PrivacyFilter): returns
  // the plan when the release goes ahead (the charge is committed first), nullptr otherwise with
  // the reply filled in.
  [[gnu::always_inline]] const client::NoisePlan* admit(std::size_t k, RecentPlan& plans) {
    const UserId user = request.users[k];
    if (!fits || user >= s.spent.size()) {
      replies.kind[k] = ReplyKind::rejected;
      return nullptr;
    }
    client::PrivacyFilter filter(s.config, s.spent[user], s.halted[user] != 0);
    const double rho = request.rho[k];
    if (!(rho > 0)) {  // ρ ≤ 0 or NaN: a device rejects the request itself and says nothing
      replies.kind[k] = ReplyKind::rejected;  // about its budget (remaining stays 0)
      return nullptr;
    }
    // plan_release, in two steps so that plan_noise's work is kept across rounds.
    if (rho != plans.rho) {
      plans.rho = rho;
      plans.plan = plans.cache.find(lipschitz, rho, s.config.rho_capacity());
      plans.covered = plans.plan && client::plan_covers(*plans.plan, extent);
    }
    const client::NoisePlan* plan = plans.plan;
    if (!plans.covered) {  // a ρ plan_release refuses
      replies.kind[k] = ReplyKind::rejected;
      replies.remaining[k] = filter.remaining();
      return nullptr;
    }
    const double charge = plan->charged_rho;
    if (!client::admit_or_halt(filter, charge, [&] { s.halted[user] = 1; })) {
      replies.kind[k] = ReplyKind::refused;
      replies.remaining[k] = filter.remaining();
      return nullptr;
    }
    filter.commit(charge);  // charged before anything is released, as on the device
    s.spent[user] = filter.spent();
    replies.kind[k] = ReplyKind::answered;
    replies.charged[k] = Charge{charge};
    replies.remaining[k] = filter.remaining();
    return plan;
  }

  // Releases the batch of slots [first, last): the admitted ones, b.slot.
  void release_fast(FastBatch& b, std::size_t first, std::size_t last) {
    const std::size_t m = b.slot.size(), d = s.dimension;
    if (m == 0) return;
    s.released.fetch_add(m * out_dim, std::memory_order_relaxed);
    const std::size_t runs = b.run_plan.size();
    const auto run_end = [&](std::size_t r) { return r + 1 < runs ? b.run_begin[r + 1] : m; };
    // The device's input: its component clamped to the plan's box, then φ (release_input).
    b.inputs.resize(m * d);
    for (std::size_t r = 0; r < runs; ++r) {
      const double limit = client::input_limit(spec, b.run_plan[r]);
      for (std::size_t j = b.run_begin[r]; j < run_end(r); ++j) {
        const double* x = s.points.data() + static_cast<std::size_t>(request.users[b.slot[j]]) * d;
        double* in = b.inputs.data() + j * d;
        for (std::size_t t = 0; t < d; ++t) in[t] = std::clamp(x[t], -limit, limit);
      }
    }
    const double* phi = b.inputs.data();
    if (spec.kind != StatisticKind::location) {
      b.phi.resize(m * out_dim);
      client::evaluate_unchecked(spec, b.inputs.data(), m, d, b.phi.data());
      phi = b.phi.data();
    }
    // out_dim standard normals per user: pairs (block t) of the user's stream, the first one
    // only when out_dim is 1.
    b.normals.resize(m * out_dim);
    if (out_dim == 1) {
      normal_pairs(stream, b.keys.data(), nullptr, m, b.normals.data(), false);
    } else {
      const std::size_t blocks = (out_dim + 1) / 2;
      b.item_keys.resize(m * blocks);
      b.item_blocks.resize(m * blocks);
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t t = 0; t < blocks; ++t) {
          b.item_keys[j * blocks + t] = b.keys[j];
          b.item_blocks[j * blocks + t] = static_cast<std::uint32_t>(t);
        }
      const bool even = out_dim % 2 == 0;
      double* pairs = even ? b.normals.data() : (b.pairs.resize(m * 2 * blocks), b.pairs.data());
      normal_pairs(stream, b.item_keys.data(), b.item_blocks.data(), m * blocks, pairs, true);
      if (!even)
        for (std::size_t j = 0; j < m; ++j)
          std::copy_n(pairs + j * 2 * blocks, out_dim, b.normals.data() + j * out_dim);
    }
    // The device's grid, run by run. When every slot of the batch was admitted, the releases
    // go straight to the replies (slot first + j); otherwise through a buffer to their slots.
    const bool whole = m == last - first;
    double* released = whole ? replies.values.data() + first * out_dim
                             : (b.released.resize(m * out_dim), b.released.data());
    for (std::size_t r = 0; r < runs; ++r) {
      const std::size_t from = b.run_begin[r] * out_dim,
                        count = (run_end(r) - b.run_begin[r]) * out_dim;
      client::privatize_with_normals({phi + from, count}, b.run_plan[r],
                                     {b.normals.data() + from, count}, {released + from, count});
    }
    if (!whole)
      for (std::size_t j = 0; j < m; ++j)
        std::copy_n(released + j * out_dim, out_dim,
                    replies.values.data() + static_cast<std::size_t>(b.slot[j]) * out_dim);
  }

  SimulatedFleet::State& s;
  const RoundRequest& request;
  RoundReplies& replies;
  client::StatisticSpec spec;
  std::size_t out_dim = 0;
  bool fits = false;
  std::uint64_t stream = 0;
  double lipschitz = 1, extent = 0;
};

void SimulatedFleet::ask(const RoundRequest& request, RoundReplies& replies) {
  RoundRunner round(*state_, request, replies);
  parallel_chunks(request.users.size(), state_->threads,
                  [&](std::size_t begin, std::size_t end, unsigned) {
                    // Per thread, whoever calls: the engine asks chunks of a round concurrently.
                    thread_local PlanCache plans;
                    round.run(begin, end, plans);
                  });
}

}  // namespace cgp::simulation

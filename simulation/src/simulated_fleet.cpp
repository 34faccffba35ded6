#include "cgp/simulation/simulated_fleet.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <thread>
#include <unordered_map>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/validate.hpp"
#include "fast_normals.hpp"
#include "parallel.hpp"

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

// Hashes a double by its bits (std::hash<double> goes through _Hash_bytes: slow per user).
struct DoubleBitsHash {
  std::size_t operator()(double v) const noexcept {
    return static_cast<std::size_t>(std::bit_cast<std::uint64_t>(v) * 0x9e3779b97f4a7c15ULL >> 17);
  }
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
  std::vector<double> points;
  std::vector<client::PrivacyFilter> filters;
  std::uint64_t seed = 0;
  unsigned threads = 1;
  SimulationNoise noise = SimulationNoise::fast;
};

SimulatedFleet::SimulatedFleet(std::unique_ptr<State> state) : state_(std::move(state)) {}
SimulatedFleet::SimulatedFleet(SimulatedFleet&&) noexcept = default;
SimulatedFleet& SimulatedFleet::operator=(SimulatedFleet&&) noexcept = default;
SimulatedFleet::~SimulatedFleet() = default;

Expected<SimulatedFleet> SimulatedFleet::create(const DeviceConfig& config,
                                                std::span<const double> points,
                                                std::size_t dimension, std::uint64_t seed,
                                                unsigned threads, SimulationNoise noise) {
  CGP_RETURN_IF_ERROR(validate_fleet_points(points, dimension));
  auto state = std::make_unique<State>(State{config, dimension, {}, {}, seed, 1, noise});
  state->points.assign(points.begin(), points.end());
  state->filters.assign(points.size() / dimension, client::PrivacyFilter(config));
  state->threads = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  return SimulatedFleet(std::move(state));
}

std::size_t SimulatedFleet::size() const noexcept {
  return state_->filters.size();
}
std::size_t SimulatedFleet::dimension() const noexcept {
  return state_->dimension;
}
double SimulatedFleet::initial_budget() const noexcept {
  return state_->config.rho_capacity();
}
double SimulatedFleet::spent(UserId user) const noexcept {
  return state_->filters[user].spent();
}
unsigned SimulatedFleet::threads() const noexcept {
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
  std::fill(state_->filters.begin(), state_->filters.end(), client::PrivacyFilter(state_->config));
  state_->seed = seed;
}

void SimulatedFleet::ask(const RoundRequest& request, RoundReplies& replies) {
  State& s = *state_;
  const std::size_t asked = request.users.size();
  client::StatisticSpec spec;
  spec.kind = request.statistic;
  spec.point = request.point;
  spec.region = request.region;
  const std::size_t out_dim = spec.output_dimension(s.dimension);
  replies.resize(asked, out_dim);
  // Requests that no device of this fleet could evaluate are rejected as a whole.
  const std::size_t required = spec.required_dimension();
  const bool fits = (required == 0 || required == s.dimension) &&
                    (spec.kind != StatisticKind::signed_distance_to_region || spec.region) &&
                    request.rho.size() == asked;
  const std::uint64_t stream = round_stream(request.query_id, request.round);

  parallel_chunks(asked, s.threads, [&](std::size_t begin, std::size_t end, unsigned) {
    client::ReleaseScratch scratch;
    std::vector<double> out, normals;
    // Plans by ρ: a round asks most users the same ρ, Alg. 3 a few distinct ones.
    std::unordered_map<double, Expected<client::NoisePlan>, DoubleBitsHash> plans;
    double current_rho = -1;
    const Expected<client::NoisePlan>* current_plan = nullptr;
    for (std::size_t k = begin; k < end; ++k) {
      const UserId user = request.users[k];
      if (!fits || user >= s.filters.size()) {
        replies.kind[k] = ReplyKind::rejected;
        continue;
      }
      client::PrivacyFilter& filter = s.filters[user];
      const double rho = request.rho[k];
      if (!(rho > 0)) {  // plan_release refuses it too; kept out of the plan cache (NaN, ±0)
        replies.kind[k] = ReplyKind::rejected;
        replies.remaining[k] = filter.remaining();
        continue;
      }
      if (rho != current_rho) {  // most rounds ask every user the same ρ: no lookup then
        auto planned = plans.find(rho);
        if (planned == plans.end())
          planned =
              plans.emplace(rho, client::plan_release(spec, rho, s.config.rho_capacity())).first;
        current_plan = &planned->second;  // stable: unordered_map never moves its elements
        current_rho = rho;
      }
      const Expected<client::NoisePlan>& plan = *current_plan;
      if (!plan) {
        replies.kind[k] = ReplyKind::rejected;
        replies.remaining[k] = filter.remaining();
        continue;
      }
      const double charge = plan->charged_rho;
      if (!filter.admits(charge)) {
        filter.halt_if_sticky();
        replies.kind[k] = ReplyKind::refused;
        replies.remaining[k] = filter.remaining();
        continue;
      }
      const std::span<const double> x(
          s.points.data() + static_cast<std::size_t>(user) * s.dimension, s.dimension);
      if (s.noise == SimulationNoise::fast) {
        const auto phi = client::release_input(spec, x, *plan, scratch);
        normals.resize(phi.size());
        fast_normals(user_key(s.seed, user), stream, normals.data(), normals.size());
        client::privatize_with_normals(phi, *plan, normals, out);
      } else {
        client::SimulationRandom random(user_key(s.seed, user), stream);
        client::RandomBits bits(random);
        if (!client::release_statistic(spec, x, *plan, bits, scratch, out).ok()) {
          replies.kind[k] = ReplyKind::rejected;
          replies.remaining[k] = filter.remaining();
          continue;
        }
      }
      filter.commit(charge);
      std::copy(out.begin(), out.end(),
                replies.values.begin() + static_cast<std::ptrdiff_t>(k * out_dim));
      replies.kind[k] = ReplyKind::answered;
      replies.charged[k] = charge;
      replies.remaining[k] = filter.remaining();
    }
  });
}

}  // namespace cgp::simulation

#include "cgp/coordinator/elimination.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/parallel.hpp"
#include "cgp/common/privacy/confidence.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/coordinator/round_fold.hpp"
#include "cgp/coordinator/shard.hpp"
#include "cgp/coordinator/valid_triple.hpp"

namespace cgp::coordinator {
namespace {

// Users per chunk when a fleet takes concurrent rounds: a chunk's request and replies stay in
// cache while the engine reads them. Fixed, so a round's chunks (and the order in which its
// lists are filled) do not depend on the thread count.
constexpr std::size_t kChunk = 1024;

// One thread's share of a round: the rules that ask and read it (with their lists, in the order
// it read them) and the scratch of a round asked through Fleet::ask. Lists are merged in chunk
// order, so a result never depends on how many threads read it.
struct alignas(64) Worker {  // its own cache lines: workers write their lists per user
  RoundFold fold;
  std::vector<UserId> asked;
  std::vector<double> asked_rho;
  std::vector<Charge> asked_charge;  // device_charge(asked_rho[k]): what the mirror settles
  RoundRequest request;
  RoundReplies replies;
};

// A caller's own split: 1 to kMaxRounds parts, each > 0 and finite, the sum ≤ 1.
Status validate_fractions(const std::vector<double>& fractions) {
  CGP_RETURN_IF_ERROR(require_count_in("fractions", fractions.size(), 1, privacy::kMaxRounds));
  double sum = 0;
  for (std::size_t j = 0; j < fractions.size(); ++j) {
    if (!(std::isfinite(fractions[j]) && fractions[j] > 0))
      return require_finite_positive(indexed_name("fractions", j), fractions[j]);
    sum += fractions[j];
  }
  if (!(sum <= 1))
    return make_error(ErrorCode::out_of_range, "fractions",
                      "fractions must sum to at most 1, got " + format_number(sum));
  return {};
}

void append(std::vector<UserId>& to, const std::vector<UserId>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// append, for lists a worker refills next round: the first one is taken whole (swapped, no
// copy: with one thread, the only one).
template <class T>
void take(std::vector<T>& to, std::vector<T>& from) {
  if (to.empty())
    to.swap(from);
  else
    to.insert(to.end(), from.begin(), from.end());
}

// The k smallest of `values` (as a multiset, in no order) into `out`: a bounded max-heap in one
// pass, no copy of the values (k is small next to the users that answered).
void smallest_values(const std::vector<double>& values, std::size_t k, std::vector<double>& out) {
  if (values.size() <= k) {
    out = values;
    return;
  }
  out.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k));
  std::make_heap(out.begin(), out.end());
  for (std::size_t i = k; i < values.size(); ++i) {
    if (!(values[i] < out.front())) continue;
    std::pop_heap(out.begin(), out.end());
    out.back() = values[i];
    std::push_heap(out.begin(), out.end());
  }
}

class Engine {
 public:
  Engine(Fleet& fleet, BudgetMirror& mirror, const EliminationSetup& setup)
      : fleet_(fleet), mirror_(mirror), setup_(setup) {}

  // Checks the query and sets up G₀ (`group`): every user of `charges`. Collective: every shard
  // fails when one does, and learns |G₀| over every shard (group_users()).
  Status init(const UserCharges& charges, std::size_t rounds, std::vector<UserId>& group) {
    Status local = init_local(charges, rounds, group);
    CGP_RETURN_IF_ERROR(agree_over_shards(setup_.shard, std::move(local)));
    group_users_ = sum_over_shards(setup_.shard, group.size());
    if (group_users_ == 0)
      return make_error(ErrorCode::invalid_argument, "users",
                        "users is empty: the query asks no user");
    return {};
  }

  // Users in the group over every shard, as of the last end_round (init: |G₀|).
  std::uint64_t group_users() const noexcept { return group_users_; }

  // Ends round j with `after` users of this shard in G_j: the round's counts over every shard go
  // to the report, and group_users() becomes |G_j|.
  void end_round(std::size_t after) {
    // What a lost shard's users decided so far count for (the live tier): sent with this sum.
    note_decided(setup_.shard, {result_.s1.size(), result_.s0.size()});
    std::uint64_t counts[2] = {asked_, after};
    sum_over_shards(setup_.shard, counts);
    result_.report.asked_per_round.push_back(counts[0]);
    result_.report.eliminated_per_round.push_back(group_users_ - counts[1]);
    group_users_ = counts[1];
  }

 private:
  Status init_local(const UserCharges& charges, std::size_t rounds, std::vector<UserId>& group) {
    const Shard& shard = setup_.shard;
    CGP_RETURN_IF_ERROR(validate_shard(shard, fleet_.size()));
    CGP_RETURN_IF_ERROR(charges.validate(fleet_.size(), /*allow_empty=*/shard.sharded()));
    if (mirror_.size() != fleet_.size())
      return make_error(ErrorCode::dimension_mismatch, "mirror", "mirror size differs from fleet");
    CGP_RETURN_IF_ERROR(require_open_interval("beta0", setup_.beta0, 0.0, 1.0));
    if (setup_.fractions.empty()) {
      CGP_ASSIGN_OR_RETURN(auto fractions, privacy::split_budget(1.0, rounds, setup_.split));
      fractions_ = std::move(fractions);
    } else {
      CGP_RETURN_IF_ERROR(validate_fractions(setup_.fractions));
      fractions_ = setup_.fractions;
    }
    if (setup_.triple == Triple::distance &&
        setup_.phi.statistic == StatisticKind::signed_distance_to_region && !setup_.phi.region)
      return make_error(ErrorCode::missing_field, "region", "the query needs a region");
    const std::size_t n = fleet_.size();
    Estimates& e = result_.estimates;
    e.reset(n, setup_.triple == Triple::point ? fleet_.dimension() : 1);
    result_.report.charged.assign(n, Charge{});
    group = charges.users(n);
    // The one conversion from a charge to the ρ a release is asked at: the device charges
    // device_charge(ρ), and device_charge(rho_within_charge(cap)) ≤ cap. Each round asks a
    // shaved fraction of it (ask_round), so a user's charges over the query sum to ≤ its cap.
    if (charges.is_uniform()) {
      uniform_rho_ = privacy::rho_within_charge(charges.cap(0).value());
    } else {
      // Users share caps (Alg. 3: thousands of distinct ones among many more users): each is
      // converted once, through a small table by the cap's bits (a slot keeps its last cap),
      // and users of one converted cap share a class, whose ρ a round converts and a fleet
      // plans once (RoundFold::Query). Class 0 is ρ = 0: users not in the query.
      class_by_user_.assign(n, 0);
      class_rho_.assign(1, 0.0);
      constexpr std::size_t kSlots = 4096;
      struct Converted {
        double cap = 0;  // 0: empty (caps are > 0)
        std::uint32_t rho_class = 0;
      };
      std::vector<Converted> converted(kSlots);
      for (std::size_t k = 0; k < group.size(); ++k) {
        const double cap = charges.cap(k).value();
        const std::uint64_t bits = std::bit_cast<std::uint64_t>(cap);
        Converted& slot = converted[(bits * 0x9e3779b97f4a7c15ULL >> 32) % kSlots];
        if (slot.cap != cap) {
          slot = {cap, static_cast<std::uint32_t>(class_rho_.size())};
          class_rho_.push_back(privacy::rho_within_charge(cap));
        }
        class_by_user_[group[k]] = slot.rho_class;
      }
      class_round_rho_.resize(class_rho_.size());
      class_round_charge_.resize(class_rho_.size());
    }

    RoundRequest request;
    request.query_id = setup_.query_id;
    request.component_id = setup_.component_id;
    if (setup_.triple == Triple::point) {
      request.statistic = StatisticKind::location;
    } else {
      request.statistic = setup_.phi.statistic;
      request.point = setup_.phi.point;
      request.region = setup_.phi.region;
    }
    workers_.resize(std::max(1u, fleet_.concurrency()));
    RoundFold::Query query;
    query.mirror = &mirror_;
    query.estimates = &e;
    query.charged = result_.report.charged.data();
    query.setup = &setup_;
    query.uniform_rho = uniform_rho_;
    if (!class_by_user_.empty()) {
      query.class_by_user = class_by_user_.data();
      query.classes = class_rho_.size();
      query.class_round_rho = class_round_rho_.data();
      query.class_round_charge = class_round_charge_.data();
    }
    for (Worker& w : workers_) {
      w.request = request;
      w.fold.start_query(query);
    }
    return {};
  }

 public:
  // Round j (0-based) for `group`, each user asked ρ_u·round.fraction; each answer is decided
  // by round.decision as it is read (its estimate including this round), or, under
  // Decision::custom, handed to on_answer(worker, u). The workers' lists are then merged in
  // order. A fleet with concurrency() > 0 is asked in chunks, in parallel, each chunk folded by
  // the fleet itself when it can (Fleet::ask_folded).
  template <class OnAnswer>
  void ask_round(std::span<const UserId> group, std::size_t j, const RoundFold::Round& round,
                 OnAnswer&& on_answer) {
    const bool chunked = fleet_.concurrency() > 0;
    const std::size_t chunk = chunked ? kChunk : std::max<std::size_t>(1, group.size());
    const std::size_t chunks = (group.size() + chunk - 1) / chunk;
    // Each class's ρ and charge this round, once for all its users (RoundFold::asked_at's).
    for (std::size_t c = 0; c < class_rho_.size(); ++c)
      RoundFold::asked_at(class_rho_[c], round.fraction, class_round_rho_[c],
                          class_round_charge_[c]);
    for (Worker& w : workers_) w.fold.start_round(round);
    parallel_chunks(
        chunks, static_cast<unsigned>(workers_.size()),
        [&](std::size_t first, std::size_t last, unsigned part) {
          Worker& w = workers_[part];
          w.request.round = static_cast<std::uint32_t>(j + 1);
          for (std::size_t c = first; c < last; ++c) {
            const std::size_t begin = c * chunk, end = std::min(group.size(), begin + chunk);
            ask_chunk(w, group.subspan(begin, end - begin), on_answer);
          }
        },
        2);
    QueryReport& report = result_.report;
    asked_ = 0;
    for (const Worker& w : workers_) append(report.refused, w.fold.lists.not_asked);
    for (const Worker& w : workers_) {
      const FoldLists& lists = w.fold.lists;
      asked_ += lists.asked;
      append(report.refused, lists.refused);
      append(report.rejected, lists.rejected);
      append(report.unanswered, lists.unanswered);
      append(report.not_reached, lists.not_reached);
    }
    report.rounds_used = j + 1;
  }
  void ask_round(std::span<const UserId> group, std::size_t j, const RoundFold::Round& round) {
    ask_round(group, j, round, [](Worker&, UserId) {});
  }

  // λ(d′, β₀/(c·|G_{j−1}|)) for this round's radii, |G_{j−1}| over every shard.
  Expected<double> round_lambda() const {
    const double beta =
        setup_.beta0 / (static_cast<double>(fractions_.size()) * static_cast<double>(group_users_));
    return privacy::gaussian_norm_bound(result_.estimates.dimension, beta);
  }

  const std::vector<double>& fractions() const { return fractions_; }
  std::vector<Worker>& workers() { return workers_; }
  EliminationResult& result() { return result_; }

 private:
  // One chunk of a round: folded by the fleet, or asked, then every reply read once.
  template <class OnAnswer>
  void ask_chunk(Worker& w, std::span<const UserId> users, OnAnswer& on_answer) {
    RoundFold& fold = w.fold;
    w.request.users = users;
    w.request.rho = {};
    if (fold.round().decision != Decision::custom && fleet_.ask_folded(w.request, fold)) return;
    w.asked.clear();
    w.asked_rho.clear();
    w.asked_charge.clear();
    for (UserId u : users) {
      double r;
      Charge charge;
      if (!fold.ask(u, r, charge)) continue;
      w.asked.push_back(u);
      w.asked_rho.push_back(r);
      w.asked_charge.push_back(charge);
    }
    if (w.asked.empty()) return;
    w.request.users = w.asked;
    w.request.rho = w.asked_rho;
    fleet_.ask(w.request, w.replies);

    const std::size_t d = result_.estimates.dimension;
    const RoundReplies& replies = w.replies;
    for (std::size_t k = 0; k < w.asked.size(); ++k) {
      const UserId u = w.asked[k];
      if (fold.fold(u, w.asked_rho[k], replies.kind[k], w.asked_charge[k], replies.charged[k],
                    replies.remaining[k], replies.values.data() + k * d))
        on_answer(w, u);
    }
  }

  Fleet& fleet_;
  BudgetMirror& mirror_;
  const EliminationSetup& setup_;
  double uniform_rho_ = 0;  // the ρ every user is asked over the query, if uniform
  // Else each user's class (0: not asked) and each class's ρ over the query, and this round's
  // ρ and charge per class.
  std::vector<std::uint32_t> class_by_user_;
  std::vector<double> class_rho_, class_round_rho_;
  std::vector<Charge> class_round_charge_;
  std::vector<double> fractions_;
  std::uint64_t group_users_ = 0;  // |G| over every shard
  std::uint64_t asked_ = 0;        // this shard's users asked in the last round
  EliminationResult result_;
  std::vector<Worker> workers_;
};

}  // namespace

double Usefulness::evaluate(std::span<const double> x) const noexcept {
  switch (statistic) {
    case StatisticKind::signed_distance_to_region:
      return geometry::signed_distance(*region, x);
    case StatisticKind::distance_to_point:
      return geometry::euclidean_distance(x, point);
    case StatisticKind::location:
      return x[0];  // a 1-D value as it is (the threshold count)
  }
  return x[0];
}

void Usefulness::evaluate(const double* points, std::size_t count, std::size_t d,
                          double* out) const noexcept {
  switch (statistic) {
    case StatisticKind::signed_distance_to_region:
      return geometry::signed_distances(*region, points, count, out);
    case StatisticKind::distance_to_point:
      return geometry::euclidean_distances(point, points, count, out);
    case StatisticKind::location:
      for (std::size_t i = 0; i < count; ++i) out[i] = points[i * d];
      return;
  }
}

void Estimates::reset(std::size_t users, std::size_t release_dimension) {
  dimension = release_dimension;
  sum.assign(users * dimension, 0.0);
  rho_bar.assign(users, 0.0);
}

Expected<EliminationResult> eliminate_noninteractive(Fleet& fleet, BudgetMirror& mirror,
                                                     const EliminationSetup& setup,
                                                     const UserCharges& charges, double nu_low,
                                                     double nu_high) {
  return eliminate_noninteractive(fleet, mirror, setup, charges, nu_low, nu_high, StopRule{});
}

Expected<EliminationResult> eliminate_noninteractive(Fleet& fleet, BudgetMirror& mirror,
                                                     const EliminationSetup& setup,
                                                     const UserCharges& charges, double nu_low,
                                                     double nu_high, const StopRule& stop) {
  if (std::isnan(nu_low) || std::isnan(nu_high) || nu_low > nu_high)
    return make_error(ErrorCode::invalid_argument, "nu_low",
                      "nu_low must be <= nu_high, got " + format_number(nu_low) + " and " +
                          format_number(nu_high));
  Engine engine(fleet, mirror, setup);
  std::vector<UserId> group, next, answered;
  CGP_RETURN_IF_ERROR(engine.init(charges, setup.rounds, group));
  EliminationResult& result = engine.result();
  for (std::size_t j = 0; j < engine.fractions().size() && engine.group_users() > 0; ++j) {
    // λ depends on |G_{j−1}| only, so every answer is decided as it is read.
    CGP_ASSIGN_OR_RETURN(auto lambda, engine.round_lambda());
    engine.ask_round(group, j,
                     {.fraction = engine.fractions()[j],
                      .decision = Decision::thresholds,
                      .nu_low = nu_low,
                      .nu_high = nu_high,
                      .lambda = lambda});
    next.clear();
    for (Worker& w : engine.workers()) {
      append(result.s1, w.fold.lists.s1);
      append(result.s0, w.fold.lists.s0);
      take(next, w.fold.lists.next);
    }
    engine.end_round(next.size());
    group.swap(next);
    if (stop && stop(result, group)) break;
  }
  result.remaining = std::move(group);
  return std::move(result);
}

Expected<EliminationResult> eliminate_regions(Fleet& fleet, BudgetMirror& mirror,
                                              const EliminationSetup& setup,
                                              const UserCharges& charges,
                                              std::span<const geometry::Region> regions,
                                              const std::vector<char>& competing,
                                              const StopRule& stop) {
  if (setup.triple != Triple::point)
    return make_error(ErrorCode::invalid_argument, "method",
                      "method must be PM0 for a race of regions: one point release gives a "
                      "user's distance to every region");
  if (setup.shard.sharded())
    return make_error(ErrorCode::invalid_argument, "shard", "a race of regions runs unsharded");
  if (competing.size() != regions.size())
    return make_error(ErrorCode::dimension_mismatch, "competing",
                      "competing must have one flag per region");
  Engine engine(fleet, mirror, setup);
  std::vector<UserId> group, next;
  CGP_RETURN_IF_ERROR(engine.init(charges, setup.rounds, group));
  EliminationResult& result = engine.result();
  result.radius.assign(fleet.size(), 0.0);
  for (std::size_t j = 0; j < engine.fractions().size() && engine.group_users() > 0; ++j) {
    CGP_ASSIGN_OR_RETURN(auto lambda, engine.round_lambda());
    const RoundFold::Round round{
        .fraction = engine.fractions()[j], .decision = Decision::custom, .lambda = lambda};
    engine.ask_round(group, j, round, [&](Worker& w, UserId u) {
      const std::span<const double> mean = w.fold.mean(u);
      const double h = w.fold.radius(u);
      result.radius[u] = h;
      bool undecided = false;
      for (std::size_t r = 0; r < regions.size() && !undecided; ++r)
        undecided = competing[r] && std::fabs(geometry::signed_distance(regions[r], mean)) <= h;
      (undecided ? w.fold.lists.next : w.fold.lists.s0).push_back(u);
    });
    next.clear();
    for (const Worker& w : engine.workers()) {
      append(result.s0, w.fold.lists.s0);
      append(next, w.fold.lists.next);
    }
    engine.end_round(next.size());
    group.swap(next);
    if (stop && stop(result, group)) break;
  }
  result.remaining = std::move(group);
  return std::move(result);
}

Expected<EliminationResult> eliminate_k(Fleet& fleet, BudgetMirror& mirror,
                                        const EliminationSetup& setup, const UserCharges& charges,
                                        std::size_t k) {
  if (k == 0) return make_error(ErrorCode::out_of_range, "k", "k must be >= 1, got 0");
  Engine engine(fleet, mirror, setup);
  std::vector<UserId> group, next, answered;
  CGP_RETURN_IF_ERROR(engine.init(charges, setup.rounds, group));
  EliminationResult& result = engine.result();
  std::vector<double> lower, upper, scratch;
  std::vector<Ranked> ranked;
  const Shard& shard = setup.shard;
  for (std::size_t j = 0; j < engine.fractions().size() && engine.group_users() > k; ++j) {
    CGP_ASSIGN_OR_RETURN(auto lambda, engine.round_lambda());
    engine.ask_round(
        group, j,
        {.fraction = engine.fractions()[j], .decision = Decision::interval, .lambda = lambda});
    answered.clear();
    lower.clear();
    upper.clear();
    for (Worker& w : engine.workers()) {
      FoldLists& lists = w.fold.lists;
      take(answered, lists.next);
      take(lower, lists.lower);
      take(upper, lists.upper);
    }
    next.clear();
    if (sum_over_shards(shard, answered.size()) <= k) {
      next = answered;
    } else {
      // t₁..t_k: the k smallest upper ends over every shard; keep every user whose interval
      // reaches below the k-th of them (that includes t₁..t_k and every interval meeting
      // I_{t_k}). A shard offers its own k smallest.
      smallest_values(upper, k, scratch);
      ranked.clear();
      for (double value : scratch) ranked.push_back({value, 0});
      const auto smallest = smallest_over_shards(shard, std::move(ranked), k);
      // Empty only when a shard lost mid-query (the live tier) had counted answers the others
      // never saw: nobody is eliminated on nothing.
      if (smallest.empty()) {
        next = answered;
      } else {
        const double kth_upper = smallest.back().key;
        for (std::size_t a = 0; a < answered.size(); ++a)
          if (lower[a] <= kth_upper) next.push_back(answered[a]);
      }
    }
    engine.end_round(next.size());
    group.swap(next);
  }
  result.remaining = std::move(group);
  return std::move(result);
}

Expected<EliminationResult> release_once(Fleet& fleet, BudgetMirror& mirror,
                                         const EliminationSetup& setup,
                                         const UserCharges& charges) {
  Engine engine(fleet, mirror, setup);
  std::vector<UserId> users, answered;
  CGP_RETURN_IF_ERROR(engine.init(charges, 1, users));
  EliminationResult& result = engine.result();
  engine.ask_round(users, 0, {.fraction = 1.0, .decision = Decision::keep});
  for (const Worker& w : engine.workers()) append(answered, w.fold.lists.next);
  engine.end_round(users.size());  // nobody is eliminated
  result.remaining = std::move(answered);
  return std::move(result);
}

}  // namespace cgp::coordinator

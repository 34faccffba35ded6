// How the query engine asks and reads one round, user by user (elimination.cpp), as inline rules
// a fleet in this process may run inside its own pass over a chunk of users
// (Fleet::ask_folded): one pass decides whether the mirror lets a user be asked, runs the
// device's admission and release, and reads the reply — mirror, running estimate, charge, the
// user's list — with no request or reply arrays in between. The engine's own path, for every
// fleet, calls the very same functions over a round's replies, so the two cannot drift.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/elimination.hpp"
#include "cgp/coordinator/valid_triple.hpp"

namespace cgp::coordinator {

// Each part of a user's split is shaved so that Σ_j ρ_i·f_j never exceeds ρ_i by rounding.
inline constexpr double kSplitShave = 1 - 0x1p-40;

// What becomes of an answer once its estimate includes it.
enum class Decision : std::uint8_t {
  keep,        // it stays in the group (release_once)
  thresholds,  // PIE-NI: S₁ if φ̄ < ν_low − h, S₀ if φ̄ > ν_high + h, else G_j
  interval,    // PIE-k: it goes on with its interval [φ̄ − h, φ̄ + h]
  custom,      // the caller decides (eliminate_regions); a fleet does not fold such a round
};

// One thread's lists of a round, in the order its users were read; the engine merges the
// threads' lists in chunk order, so a result never depends on how many threads read it.
struct FoldLists {
  std::size_t asked = 0;
  // Refused by the mirror (not asked), by the device; rejected; no answer; never reached.
  std::vector<UserId> not_asked, refused, rejected, unanswered, not_reached;
  // PIE-NI's S₁, S₀ and G_j; PIE-k's answers (next) with their interval ends.
  std::vector<UserId> s1, s0, next;
  std::vector<double> lower, upper;
  void clear() {
    asked = 0;
    not_asked.clear(), refused.clear(), rejected.clear(), unanswered.clear();
    not_reached.clear();
    s1.clear(), s0.clear(), next.clear();
    lower.clear(), upper.clear();
  }
};

class RoundFold {
 public:
  // The query's state the rules read and write (the engine's, not owned).
  struct Query {
    BudgetMirror* mirror = nullptr;
    Estimates* estimates = nullptr;
    Charge* charged = nullptr;  // the report's charge per user id
    const EliminationSetup* setup = nullptr;
    double uniform_rho = 0;  // the ρ every user is asked over the query, or
    // (when class_by_user is not null) each user's class of ρ, 0 to classes − 1: users of one
    // class are asked the same ρ, whose conversion the engine makes once a round for all of them
    // (class_round_rho, class_round_charge: what asked_at gives), and a fleet plans once.
    const std::uint32_t* class_by_user = nullptr;
    std::size_t classes = 0;
    const double* class_round_rho = nullptr;
    const Charge* class_round_charge = nullptr;
  };
  // The round's part of the rules.
  struct Round {
    double fraction = 1;  // of each user's ρ asked this round (shaved by kSplitShave)
    Decision decision = Decision::keep;
    double nu_low = 0, nu_high = 0;  // thresholds
    double lambda = 0;               // λ of the round's radii (thresholds, interval)
  };

  void start_query(const Query& query) {
    query_ = query;
    mean_.resize(query.estimates->dimension);
  }
  void start_round(const Round& round) {
    round_ = round;
    lists.clear();
    last_rho_ = 0;
  }
  const Round& round() const noexcept { return round_; }

  // Whether user u is asked this round: its ρ and the charge the device will make for it
  // (privacy::device_charge, once per distinct ρ). When the mirror says u cannot pay (or its ρ
  // is 0: not in the query), u goes on the not-asked list and false is returned.
  bool ask(UserId u, double& rho, Charge& known_charge) {
    if (query_.class_by_user) {
      const std::uint32_t c = query_.class_by_user[u];
      rho = query_.class_round_rho[c];
      known_charge = query_.class_round_charge[c];
    } else {
      asked_at(query_.uniform_rho, rho, known_charge);
    }
    if (!(rho > 0)) {
      lists.not_asked.push_back(u);
      return false;
    }
    if (!mirror_admits(u, known_charge)) return false;
    ++lists.asked;
    return true;
  }

  // When every user of the query is asked the same ρ: this round's ρ and known charge (what
  // ask() gives every user), and true; else false. A fleet then checks the mirror itself with
  // mirror_admits, and counts the users it asks with count_asked.
  bool uniform_request(double& rho, Charge& known_charge) {
    if (query_.class_by_user) return false;
    asked_at(query_.uniform_rho, rho, known_charge);
    return rho > 0;
  }
  // ask() for a user of a uniform round (uniform_request): whether the mirror lets u be asked
  // the round's known charge; if not, u goes on the not-asked list.
  bool mirror_admits(UserId u, Charge known_charge) {
    if (query_.mirror->can_pay(u, known_charge)) return true;
    lists.not_asked.push_back(u);
    return false;
  }
  void count_asked(std::size_t users) noexcept { lists.asked += users; }
  // The classes of ρ of a query whose users are asked distinct ρ (0 when every user is asked
  // the same), and user u's: users of one class are asked the same ρ in a round, so a fleet may
  // keep one plan per class.
  std::size_t rho_classes() const noexcept { return query_.class_by_user ? query_.classes : 0; }
  std::uint32_t rho_class(UserId u) const noexcept { return query_.class_by_user[u]; }
  // Starts loading what the rules read and write of user u (its mirror entry, estimate and
  // charge): a fleet calls it some users ahead, so that a round over a sparse group of a large
  // fleet waits on memory for several users at once instead of one after the other.
  void prefetch(UserId u) const noexcept {
    __builtin_prefetch(query_.mirror->remaining_data() + u, 1);
    const Estimates& e = *query_.estimates;
    __builtin_prefetch(e.sum.data() + static_cast<std::size_t>(u) * e.dimension, 1);
    __builtin_prefetch(e.rho_bar.data() + u, 1);
    __builtin_prefetch(query_.charged + u, 1);
  }

  // User u's reply to the request ask() made (ρ, known charge): the mirror, and for an answer
  // (values: the release) the estimate, the charge and the decision. Returns true for an
  // answer under Decision::custom, which the caller decides.
  bool fold(UserId u, double rho, ReplyKind kind, Charge known_charge, Charge charged,
            double remaining, const double* values) {
    if (kind == ReplyKind::answered) {
      fold_answer(u, rho, known_charge, charged, remaining, values);
      return decide(u);
    }
    query_.mirror->update_with_charge(u, kind, known_charge, charged, remaining);
    switch (kind) {
      case ReplyKind::answered:
        break;
      case ReplyKind::refused:
        lists.refused.push_back(u);
        break;
      case ReplyKind::rejected:
        lists.rejected.push_back(u);
        break;
      case ReplyKind::no_answer:
        lists.unanswered.push_back(u);
        query_.charged[u] += charged;
        break;
      case ReplyKind::not_delivered:
        lists.unanswered.push_back(u);
        lists.not_reached.push_back(u);
        break;
    }
    return false;
  }

  // φ̄_u: the running mean itself (distance triple) or φ of the mean release (point triple).
  double estimate(UserId u) {
    const Estimates& e = *query_.estimates;
    if (query_.setup->triple == Triple::distance) return e.sum[u] / e.rho_bar[u];
    e.mean(u, mean_.data());
    return query_.setup->phi.evaluate(mean_);
  }
  // The mean release of u (point triple), valid until the next call.
  std::span<const double> mean(UserId u) {
    query_.estimates->mean(u, mean_.data());
    return mean_;
  }
  // h_u for the round's λ.
  double radius(UserId u) { return radii_.get(round_.lambda, query_.estimates->rho_bar[u]); }

  // Answers j < count of one batch, each asked the same ρ for the same known charge and
  // charged the same: user users[slots[j]] released values[j·dimension ..] and has remaining[j]
  // left. fold() for each, in order, with the round's decision chosen once (not custom). The
  // users are distinct (as a round's are): a point triple's batch records every answer before it
  // decides any.
  void fold_answers(std::size_t count, const UserId* users, const std::uint32_t* slots, double rho,
                    Charge known_charge, Charge charged, const double* remaining,
                    const double* values) {
    SameCharges same{rho, known_charge, charged, query_.mirror, {}};
    fold_batch(count, users, slots, same, remaining, values);
  }

  // fold_answers for a batch whose users were asked distinct ρ (Alg. 3): answer j was asked
  // rho[j] for the known charge known[j] and charged charged[j].
  void fold_answers_each(std::size_t count, const UserId* users, const std::uint32_t* slots,
                         const double* rho, const double* known, const double* charged,
                         const double* remaining, const double* values) {
    EachCharges each{rho, known, charged, query_.mirror};
    fold_batch(count, users, slots, each, remaining, values);
  }

  FoldLists lists;

 private:
  // What a batch's answers were asked and charged, and the mirror's reading of answer j of
  // user u: one ρ, known charge and charge for all (the mirror's outcome kept by its state,
  // BudgetMirror::AnswerMemo), or each answer's own (fold_answers_each).
  struct SameCharges {
    double rho_;
    Charge known_, charged_;
    BudgetMirror* mirror;
    BudgetMirror::AnswerMemo memo;  // serves this one (known charge, charge) pair
    double rho(std::size_t) const { return rho_; }
    Charge charged(std::size_t) const { return charged_; }
    void update_mirror(UserId u, std::size_t, double remaining) {
      mirror->update_answered(u, known_, charged_, remaining, memo);
    }
  };
  struct EachCharges {
    const double *rho_, *known_, *charged_;
    BudgetMirror* mirror;
    double rho(std::size_t j) const { return rho_[j]; }
    Charge charged(std::size_t j) const { return Charge{charged_[j]}; }
    void update_mirror(UserId u, std::size_t j, double remaining) {
      mirror->update_with_charge(u, ReplyKind::answered, Charge{known_[j]}, Charge{charged_[j]},
                                 remaining);
    }
  };

  // fold() for each answer of a batch (user users[slots[j]] released values[j·dimension ..] and
  // has remaining[j] left), in order, with the round's decision chosen once (not custom).
  template <class Charges>
  void fold_batch(std::size_t count, const UserId* users, const std::uint32_t* slots,
                  Charges& charges, const double* remaining, const double* values) {
    const bool distance = query_.setup->triple == Triple::distance;
    const auto run = [&]<Decision kDecision, bool kDistance>() {
      fold_batch_as<kDecision, kDistance>(count, users, slots, charges, remaining, values);
    };
    switch (round_.decision) {
      case Decision::keep:
        return run.template operator()<Decision::keep, false>();
      case Decision::thresholds:
        return distance ? run.template operator()<Decision::thresholds, true>()
                        : run.template operator()<Decision::thresholds, false>();
      case Decision::interval:
        return distance ? run.template operator()<Decision::interval, true>()
                        : run.template operator()<Decision::interval, false>();
      case Decision::custom:
        break;
    }
  }

  // Users asked the same ρ every round share ρ̄: the square root is taken once per value.
  struct RadiusCache {
    double lambda = -1, rho_bar = -1, radius = 0;
    double get(double round_lambda, double user_rho_bar) {
      if (user_rho_bar != rho_bar || round_lambda != lambda) {
        lambda = round_lambda;
        rho_bar = user_rho_bar;
        radius = radius_from_lambda(lambda, rho_bar);
      }
      return radius;
    }
  };

  // Where decide_as puts a user: the round's lists, one push at a time (a lone answer).
  struct PushToLists {
    FoldLists& lists;
    void next(UserId u) { lists.next.push_back(u); }
    void sort(UserId u, bool to_s1, bool to_s0) {
      (to_s1 ? lists.s1 : to_s0 ? lists.s0 : lists.next).push_back(u);
    }
    void interval(UserId u, double lower, double upper) {
      lists.next.push_back(u);
      lists.lower.push_back(lower);
      lists.upper.push_back(upper);
    }
  };
  // Or a batch's answers, written in place: room for `count` more in every list the decision
  // writes is made once (no capacity check per user), and the lists are cut to what was
  // written at the end. The same lists, in the same order, as PushToLists.
  template <Decision kDecision>
  class AppendToLists {
   public:
    AppendToLists(FoldLists& lists, std::size_t count) : lists_(lists) {
      // Every allocation first (what may throw), so that a failure leaves the lists unchanged.
      each_list([&](auto& list, auto*&) {
        if (list.capacity() - list.size() < count)
          list.reserve(std::max(2 * list.size(), list.size() + count));
      });
      each_list([&](auto& list, auto*& at) {  // within capacity: no allocation
        const std::size_t size = list.size();
        list.resize(size + count);
        at = list.data() + size;
      });
    }
    AppendToLists(const AppendToLists&) = delete;
    AppendToLists& operator=(const AppendToLists&) = delete;
    ~AppendToLists() {
      each_list(
          [](auto& list, auto*& at) { list.resize(static_cast<std::size_t>(at - list.data())); });
    }
    void next(UserId u) { *next_++ = u; }
    // Branch-free: u is written to all three lists and kept in one (which list a user goes to
    // is data, and a mispredicted branch per decided user cost more than the two stores).
    void sort(UserId u, bool to_s1, bool to_s0) {
      *s1_ = u, *s0_ = u, *next_ = u;
      s1_ += to_s1;
      s0_ += to_s0;
      next_ += !(to_s1 || to_s0);
    }
    void interval(UserId u, double lower, double upper) {
      *next_++ = u;
      *lower_++ = lower;
      *upper_++ = upper;
    }

   private:
    // f(list, its write position) for each list the decision writes.
    template <class F>
    void each_list(F&& f) {
      f(lists_.next, next_);
      if constexpr (kDecision == Decision::thresholds) {
        f(lists_.s1, s1_);
        f(lists_.s0, s0_);
      }
      if constexpr (kDecision == Decision::interval) {
        f(lists_.lower, lower_);
        f(lists_.upper, upper_);
      }
    }
    FoldLists& lists_;
    UserId *next_ = nullptr, *s1_ = nullptr, *s0_ = nullptr;
    double *lower_ = nullptr, *upper_ = nullptr;
  };

  // PIE-NI's rule for an answer with estimate φ̄ and radius h: S₁, S₀ or G_j.
  template <class Out>
  static void threshold(UserId u, double phi, double h, const Round& round, Out& out) {
    const bool to_s1 = phi < round.nu_low - h;
    out.sort(u, to_s1, !to_s1 && phi > round.nu_high + h);
  }

  // An answer's part of fold() before the decision: the mirror, the estimate, the charge.
  // Inline: the batch loops call it once per user and round.
  [[gnu::always_inline]] void fold_answer(UserId u, double rho, Charge known_charge, Charge charged,
                                          double remaining, const double* values) {
    query_.mirror->update_with_charge(u, ReplyKind::answered, known_charge, charged, remaining);
    record_answer(u, rho, charged, values);
  }
  // fold_answer after the mirror: the estimate and the charge.
  [[gnu::always_inline]] void record_answer(UserId u, double rho, Charge charged,
                                            const double* values) {
    Estimates& estimates = *query_.estimates;
    if (query_.setup->latest_release_only) estimates.forget(u);
    if (estimates.dimension == 1)
      estimates.add_1d(u, values[0], rho);
    else
      estimates.add(u, values, rho);
    query_.charged[u] += charged;
  }

  // The ρ asked this round of a user whose whole-query ρ is `cap`, and the charge a device makes
  // for it (privacy::device_charge, once per distinct ρ).
  void asked_at(double cap, double& rho, Charge& known_charge) {
    rho = asked_rho(cap, round_.fraction);
    if (rho > 0 && rho != last_rho_) {
      last_rho_ = rho;
      last_charge_ = Charge{privacy::device_charge(rho)};
    }
    known_charge = rho > 0 ? last_charge_ : Charge{};
  }

 public:
  // The ρ a round asking `fraction` of each user's ρ asks of a user whose whole-query ρ is
  // `cap`: one expression for both forms of asked_at, so the two give the same bits.
  static double asked_rho(double cap, double fraction) noexcept {
    return cap * fraction * kSplitShave;
  }
  // asked_at for a round asking `fraction` of each user's ρ, without the memo (the engine's
  // conversion of a class of ρ, Query::class_round_rho).
  static void asked_at(double cap, double fraction, double& rho, Charge& known_charge) {
    rho = asked_rho(cap, fraction);
    known_charge = rho > 0 ? Charge{privacy::device_charge(rho)} : Charge{};
  }

 private:
  // fold_answer and the decision for a batch, the round and the radius cache in locals (the
  // loop's stores of doubles cannot then alias them and force reloads).
  template <Decision kDecision, bool kDistance, class Charges>
  void fold_batch_as(std::size_t count, const UserId* users, const std::uint32_t* slots,
                     Charges& charges, const double* remaining, const double* values) {
    const std::size_t d = query_.estimates->dimension;
    const Round round = round_;
    RadiusCache radii = radii_;
    constexpr bool kBatchPhi = kDecision != Decision::keep && !kDistance;
    if constexpr (kBatchPhi) batch_means_.resize(count * d), batch_phi_.resize(count);
    AppendToLists<kDecision> out(lists, count);  // after every other allocation
    for (std::size_t j = 0; j < count; ++j) {
      const UserId u = users[slots[j]];
      charges.update_mirror(u, j, remaining[j]);
      record_answer(u, charges.rho(j), charges.charged(j), values + j * d);
      if constexpr (!kBatchPhi) decide_as<kDecision, kDistance>(u, round, radii, out);
    }
    if constexpr (kBatchPhi) {
      // A point triple's φ̄ is φ of the mean release: the batch's means go through φ in one
      // call (Usefulness::evaluate's batch form, the same bits as one at a time), whose square
      // roots then overlap instead of each waiting on the last.
      const Estimates& e = *query_.estimates;
      for (std::size_t j = 0; j < count; ++j) e.mean(users[slots[j]], batch_means_.data() + j * d);
      query_.setup->phi.evaluate(batch_means_.data(), count, d, batch_phi_.data());
      for (std::size_t j = 0; j < count; ++j) {
        const UserId u = users[slots[j]];
        decide_with<kDecision>(u, batch_phi_[j], radii.get(round.lambda, e.rho_bar[u]), round, out);
      }
    }
    radii_ = radii;
  }

  template <Decision kDecision, bool kDistance, class Out>
  void decide_as(UserId u, const Round& round, RadiusCache& radii, Out& out) {
    if constexpr (kDecision == Decision::keep) {
      out.next(u);
    } else {
      const Estimates& e = *query_.estimates;
      const double phi = kDistance ? e.sum[u] / e.rho_bar[u] : estimate(u);
      decide_with<kDecision>(u, phi, radii.get(round.lambda, e.rho_bar[u]), round, out);
    }
  }
  // The decision on an answer whose estimate is φ̄ = phi and radius h (thresholds, interval).
  template <Decision kDecision, class Out>
  static void decide_with(UserId u, double phi, double h, const Round& round, Out& out) {
    if constexpr (kDecision == Decision::thresholds)
      threshold(u, phi, h, round, out);
    else
      out.interval(u, phi - h, phi + h);
  }

  // The round's decision on an answer; true under Decision::custom (the caller's).
  bool decide(UserId u) {
    PushToLists out{lists};
    switch (round_.decision) {
      case Decision::keep:
        decide_as<Decision::keep, false>(u, round_, radii_, out);
        return false;
      case Decision::thresholds:
        decide_as<Decision::thresholds, false>(u, round_, radii_, out);
        return false;
      case Decision::interval:
        decide_as<Decision::interval, false>(u, round_, radii_, out);
        return false;
      case Decision::custom:
        return true;
    }
    return false;
  }

  Query query_;
  Round round_;
  double last_rho_ = 0;
  Charge last_charge_;
  RadiusCache radii_;
  std::vector<double> mean_;
  std::vector<double> batch_means_, batch_phi_;  // a point triple's batch (fold_batch_as)
};

}  // namespace cgp::coordinator

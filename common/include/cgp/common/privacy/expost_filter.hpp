// A privacy filter for ex-post private steps (seed 001, Lemma B.2), the corrected form of 000's
// Filtered Self-Reporting Composition (Thm 11/19), which is unsound as printed (ERRATA 000
// item 1): each step declares, before it runs and from earlier outputs only, the worst ε its
// output can realise (ε_max,t) and a δ_t with Pr[loss > ε_max,t] ≤ δ_t; the filter admits it iff
//   Σ_(i<t) ε_post,i + ε_max,t ≤ ε   and   Σ_(i≤t) δ_i ≤ δ,
// and is then charged the realised ε_post,t = min(loss bound of the output, ε_max,t). The first
// refusal halts the filter (the lemma's stopping time). δ = 0 gives the pure variant: each step
// must bound every output by ε_max,t. expost_filter.md has the proof sketch.
#pragma once

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

class ExPostFilter {
 public:
  // ε > 0 finite, δ ∈ [0, 1). Errors name epsilon or delta.
  static Expected<ExPostFilter> create(double epsilon, double delta);
  // A filter restored from what a ledger recorded (the same rules).
  static Expected<ExPostFilter> restore(double epsilon, double delta, double spent_epsilon,
                                        double spent_delta, bool halted);

  // Whether a step declaring (worst_epsilon, step_delta) may run now. Pure: no state changes.
  bool admits(double worst_epsilon, double step_delta) const noexcept;
  // Runs the admission rule and records the step: on admission the realised ε (clamped to
  // worst_epsilon) and δ_t are added, rounded up; on refusal the filter halts. Returns whether
  // it was admitted; bad arguments (non-finite, negative, realised > worst) are invalid_argument
  // naming the parameter, and change nothing.
  Expected<bool> charge(double worst_epsilon, double step_delta, double realised_epsilon);

  double epsilon() const noexcept { return epsilon_; }
  double delta() const noexcept { return delta_; }
  double spent_epsilon() const noexcept { return spent_epsilon_; }
  double spent_delta() const noexcept { return spent_delta_; }
  bool halted() const noexcept { return halted_; }

 private:
  ExPostFilter(double epsilon, double delta) : epsilon_(epsilon), delta_(delta) {}
  double epsilon_, delta_;
  double spent_epsilon_ = 0, spent_delta_ = 0;
  bool halted_ = false;
};

}  // namespace cgp::privacy

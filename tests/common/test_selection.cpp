// Selection and profile accountants: the reference values of the issue
// (computed independently at 30–40 digits), upper-bound checks, the errata's printed forms
// falling below real losses, and bad input by name.
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <random>

#include "cgp/common/privacy/expost_filter.hpp"
#include "cgp/common/privacy/selection.hpp"
#include "cgp/common/privacy/selection_profiles.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::privacy;

namespace {

// An upper bound that agrees with the reference to its printed digits: at most half a unit of
// the last printed digit away, plus the bound's own slack (1e-11 relative).
void check_reference(double got, double reference, int digits) {
  INFO("got " << got << ", reference " << reference);
  CHECK(std::fabs(got - reference) <= 0.5 * std::pow(10.0, -digits) + 1e-11 * reference);
}

GaussianAboveThreshold unit_at(double lo, double threshold) {
  return {0.15, std::sqrt(3.0) * 0.15, lo, 1.0, threshold};
}

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

}  // namespace

TEST_CASE("selection: Gaussian report noisy max, log form (000 Thm 8/12)", "[privacy][selection]") {
  check_reference(*gaussian_rnm_epsilon(2, 0.05, 0.3, 1), 0.609710776873, 12);
  check_reference(*gaussian_rnm_epsilon(3, 0.05, 0.3, 1), 0.845791603326, 12);
  check_reference(*gaussian_rnm_epsilon(5, 0.01, 0.3, 1), 0.220358312099, 12);
  check_reference(*gaussian_rnm_epsilon(3, 0.1, 0.5, 1), 0.70109903323, 11);
  // d = 2 has a closed form: log Φ(−(c − 2Δ)/(σ√2)) − log Φ(−c/(σ√2)); the bound is above it.
  const double closed = std::log(normal_cdf(-(1 - 0.1) / (0.3 * std::numbers::sqrt2))) -
                        std::log(normal_cdf(-1 / (0.3 * std::numbers::sqrt2)));
  const double bound = *gaussian_rnm_epsilon(2, 0.05, 0.3, 1);
  CHECK(bound >= closed);
  CHECK(bound <= closed * (1 + 1e-11));
  // Per-metre slope: range 1,000 m, m = 24, σ = 300.
  check_reference(*gaussian_rnm_slope(24, 300, 1000), 0.03104115799, 11);
  // Concavity: slope·Δ bounds ε(Δ) at every Δ.
  for (double delta : {1.0, 10.0, 100.0, 500.0, 1000.0}) {
    INFO("delta " << delta);
    CHECK(*gaussian_rnm_epsilon(24, delta, 300, 1000) <=
          *gaussian_rnm_slope(24, 300, 1000) * delta);
  }
}

TEST_CASE("selection: Gaussian Above Threshold ex-post losses (000 Lemma 18, log form)",
          "[privacy][selection]") {
  const double delta = 0.05;
  const double alert01[] = {0.334987094329, 0.858073218625, 1.49610951303};
  const double alert02[] = {0.288155133743, 0.731413293436, 1.27939540706};
  const double silent01[] = {0.334987, 0.553022, 0.829656};
  const std::uint64_t ticks[] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    INFO("t = " << ticks[i]);
    check_reference(*gaussian_at_alert_epsilon(unit_at(0, 0.5), ticks[i], delta), alert01[i],
                    i == 2 ? 11 : 12);
    check_reference(*gaussian_at_alert_epsilon(unit_at(0.2, 0.6), ticks[i], delta), alert02[i],
                    i == 2 ? 11 : 12);
    check_reference(*gaussian_at_silent_epsilon(unit_at(0, 0.5), ticks[i], delta), silent01[i], 6);
  }
  // Per-metre slopes: clamp range [0, 1000] m, threshold 700, σ_X = 100, σ_Z = 100√3.
  const GaussianAboveThreshold metres{100, 100 * std::sqrt(3.0), 0, 1000, 700};
  check_reference(*gaussian_at_worst_slope(metres, 1), 0.01875695632, 11);
  check_reference(*gaussian_at_worst_slope(metres, 10), 0.08755854377, 11);
  check_reference(*gaussian_at_worst_slope(metres, 100), 0.1385246112, 10);
  // The slope is the derivative: a Richardson-extrapolated central difference of ε agrees.
  auto eps = [&](double d) { return d >= 0 ? *gaussian_at_alert_epsilon(metres, 10, d) : 0.0; };
  const double h = 0.5;
  const double forward1 = (eps(h) - eps(0)) / h, forward2 = (eps(h / 2) - eps(0)) / (h / 2);
  CHECK(std::fabs((2 * forward2 - forward1) - *gaussian_at_alert_slope(metres, 10)) < 1e-6);
  // Concavity: ε(Δ) ≤ slope·Δ for the outputs within the horizon.
  const double worst = *gaussian_at_worst_slope(metres, 10);
  for (double d : {1.0, 30.0, 300.0, 1000.0})
    for (std::uint64_t t : {1, 5, 10}) {
      INFO("distance " << d << ", tick " << t);
      CHECK(*gaussian_at_alert_epsilon(metres, t, d) <= worst * d);
      CHECK(*gaussian_at_silent_epsilon(metres, t, d) <= worst * d);
    }
}

TEST_CASE("selection: ERRATA 000 item 2, Thm 17 as printed falls below a real loss",
          "[privacy][selection][errata]") {
  // Thm 17 prints threshold − (hi − lo) in the silent factor where the proof has threshold − hi
  // (the alerting factor keeps lo − threshold): at [0.2, 1], threshold 0.6 that is the proof's
  // integral over [0.2, 0.8]. At t = 2 it gives 0.611440, while the pair (silent query at
  // hi → hi − Δ, alerting query at lo → lo + Δ) has the exact loss 0.731413 (eqs. 36/37 are
  // equalities for given queries; the quadrature's lower end is far above the printed value).
  GaussianAboveThreshold printed = unit_at(0.2, 0.6);
  printed.range_hi = 0.8;
  const double printed_value = *gaussian_at_alert_epsilon(printed, 2, 0.05);
  check_reference(printed_value, 0.611440, 6);
  const double real = *gaussian_at_alert_epsilon(unit_at(0.2, 0.6), 2, 0.05);
  CHECK(printed_value < real - 0.1);
}

TEST_CASE("selection: ERRATA 000 item 1, the printed filter admits 99,999 steps, Lemma B.2 one",
          "[privacy][selection][errata]") {
  // Binary steps: Pr_D[1] = p, Pr_D′[1] = p·e^−L. ε_post(1) = L, ε_post(0) = ε_max.
  const double p = 1e-5, loss = 20, eps = 1;
  const double eps_max = std::log((1 - p * std::exp(-loss)) / (1 - p));
  // Thm 11/19 as printed: while outputs are 0 it runs step t iff t·ε_max < ε.
  const auto printed_steps = static_cast<long>(std::ceil(eps / eps_max)) - 1;
  CHECK(printed_steps == 99'999);
  // The interaction's real δ(1) (hockey stick over its outputs 0^(k−1)1 and 0^N).
  const auto n = static_cast<double>(printed_steps);
  const double real_delta = -std::expm1(n * std::log1p(-p)) -
                            std::exp(1.0) * -std::expm1(n * std::log1p(-p * std::exp(-loss)));
  CHECK(real_delta == Approx(0.6321187138).epsilon(1e-9));
  // The corrected filter at (ε, δ) = (1, 1e-5): a step declaring ε_max must declare δ_t = p
  // (Pr_D[loss > ε_max] = Pr_D[1]); the second such step overflows δ. Declaring δ_t = 0 needs
  // ε_max = L = 20 > ε. Either way: one step.
  auto filter = *ExPostFilter::create(eps, p);
  CHECK(*filter.charge(eps_max, p, eps_max));
  CHECK_FALSE(filter.admits(eps_max, p));
  CHECK_FALSE(filter.admits(loss, 0));
  CHECK_FALSE(*filter.charge(eps_max, p, eps_max));
  CHECK(filter.halted());
  CHECK_FALSE(filter.admits(1e-12, 0));  // halted for good
}

TEST_CASE("selection: the ex-post filter charges at most the declared worst, rounding up",
          "[privacy][selection]") {
  CGP_SEEDED(4401);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int run = 0; run < 200; ++run) {
    auto filter = *ExPostFilter::create(1.0, 0);
    double exact = 0;
    for (;;) {
      const double worst = 0.2 * unit(rng), realised = worst * unit(rng);
      const bool fits = exact + worst <= 1.0;
      const bool admitted = *filter.charge(worst, 0, realised);
      if (!admitted) {
        // Refused only when the worst could overflow (up to rounding of the running total).
        CHECK(exact + worst > 1.0 - 1e-12);
        break;
      }
      CHECK(fits);
      exact += realised;
      CHECK(filter.spent_epsilon() >= exact);
      CHECK(filter.spent_epsilon() <= 1.0);
    }
  }
  auto filter = *ExPostFilter::create(1.0, 1e-6);
  CHECK(*filter.charge(0.5, 0, 7.0) == true);  // a realised loss above the worst costs the worst
  CHECK(filter.spent_epsilon() == Approx(0.5));
  CHECK(filter.charge(-1, 0, 0).error().parameter == "worst_epsilon");
  CHECK(filter.charge(0.1, NAN, 0).error().parameter == "step_delta");
  CHECK(filter.charge(0.1, 0, -2).error().parameter == "realised_epsilon");
  CHECK(filter.spent_epsilon() == Approx(0.5));  // errors change nothing
  CHECK(ExPostFilter::create(0, 0).error().parameter == "epsilon");
  // Restored from a ledger: the same rules; a halted filter stays halted.
  // (0.9 + 0.1 would not do: the doubles' exact sum is just above 1, and the filter rounds up.)
  auto restored = *ExPostFilter::restore(1.0, 1e-6, 0.5, 0, false);
  CHECK(restored.admits(0.5, 0));
  CHECK_FALSE(restored.admits(0.5000001, 0));
  CHECK_FALSE(ExPostFilter::restore(1.0, 1e-6, 0.9, 0, false)->admits(0.1, 0));
  CHECK_FALSE(ExPostFilter::restore(1.0, 1e-6, 0.1, 0, true)->admits(1e-9, 0));
  CHECK(ExPostFilter::restore(1.0, 0, -1, 0, false).error().parameter == "spent_epsilon");
  CHECK(ExPostFilter::restore(1.0, 0, 0, NAN, false).error().parameter == "spent_delta");
  CHECK(ExPostFilter::create(1, 1).error().parameter == "delta");
}

TEST_CASE("selection: report noisy max profile is the minimum with the vector bound (002 Thm 3.2)",
          "[privacy][selection]") {
  // m = 3, σ = 1, Δ = 1, ε = 1: Thm 3.2 gives 1.52958 (vacuous), the noisy vector 0.41119.
  check_reference(*gaussian_rnm_profile_delta(3, 1, 1, 1), 0.411188979, 9);
  CHECK(*gaussian_delta_upper(2, 1) * 3 == Approx(1.52958498).epsilon(1e-8));
  // Large m: Thm 3.2 wins over the vector.
  const double thm = 1000 * *gaussian_delta_upper(2.0 / 50, 1);
  CHECK(*gaussian_rnm_profile_delta(1000, 1, 50, 1) <= thm * (1 + 1e-12));
  // ε from δ inverts δ from ε, on the user's side.
  const double eps = *gaussian_rnm_profile_epsilon(3, 1, 1, 1e-6);
  CHECK(*gaussian_rnm_profile_delta(3, 1, 1, eps) <= 1e-6);
  CHECK(*gaussian_rnm_profile_delta(3, 1, 1, eps * (1 - 1e-6)) > 1e-6);
}

TEST_CASE("selection: random-stopping selection profiles (002 Thm 5.2, 5.7, Cor 5.8)",
          "[privacy][selection]") {
  // Thm 5.2 optimised over ε₁, Gaussian base σ = 4 (μ = 1/4), η = 1, m = 30 / 300, δ = 1e-6.
  check_reference(*gaussian_selection_epsilon(RandomRuns::geometric(30), 0.25, 1e-6), 2.2883, 4);
  check_reference(*gaussian_selection_epsilon(RandomRuns::geometric(300), 0.25, 1e-6), 2.7938, 4);
  CHECK(*expected_runs(RandomRuns::geometric(30)) == Approx(30));
  // ERRATA 002 item 1: Thm 5.2 at ε₁ = ε₀ for (ε₀, δ₀, γ, η) = (0.1, 1e-3, 0.01, 1) is
  // 0.471583; Cor 5.4 as printed, (η + 2)ε₀ + δ₀/γ = 0.4, falls below it.
  const double thm52 = *tnb_selection_epsilon_from_approx_dp(1, 0.01, 0.1, 1e-3);
  check_reference(thm52, 0.471583, 6);
  CHECK(3 * 0.1 + 1e-3 / 0.01 < thm52);
  // Binomial and Poisson (values computed independently at 50 digits for these parameters).
  check_reference(*gaussian_selection_epsilon(RandomRuns::binomial(20, 0.5), 0.25, 1e-6), 2.4894812,
                  6);
  check_reference(*gaussian_selection_epsilon(RandomRuns::binomial(100, 0.1), 0.25, 1e-6),
                  2.2193108, 6);
  check_reference(*gaussian_selection_epsilon(RandomRuns::poisson(10), 0.25, 1e-6), 2.1765104, 6);
  // δ(ε) at the ε returned is within δ: the two directions agree on the user's side.
  for (const RandomRuns& runs :
       {RandomRuns::geometric(30), RandomRuns::binomial(20, 0.5), RandomRuns::poisson(10),
        RandomRuns::truncated_negative_binomial(0.5, 0.05)}) {
    const double eps = *gaussian_selection_epsilon(runs, 0.25, 1e-6);
    CHECK(*gaussian_selection_delta(runs, 0.25, eps) <= 1e-6 * (1 + 1e-9));
  }
  // The RDP baseline (002 Thm 5.1) is valid but looser than Thm 5.2 (002 Fig. 3).
  for (double m : {30.0, 300.0, 3000.0}) {
    INFO("m = " << m);
    CHECK(*gaussian_selection_epsilon_rdp(RandomRuns::geometric(m), 0.25, 1e-6) >
          *gaussian_selection_epsilon(RandomRuns::geometric(m), 0.25, 1e-6));
  }
  CHECK(gaussian_selection_epsilon_rdp(RandomRuns::poisson(3), 0.25, 1e-6).error().parameter ==
        "runs");
  // Bad input, by name.
  CHECK(gaussian_selection_epsilon(RandomRuns::geometric(0.5), 0.25, 1e-6).error().parameter ==
        "gamma");
  CHECK(gaussian_selection_epsilon(RandomRuns::binomial(0, 0.5), 0.25, 1e-6).error().parameter ==
        "n");
  CHECK(gaussian_selection_epsilon(RandomRuns::poisson(-1), 0.25, 1e-6).error().parameter ==
        "mean");
  CHECK(gaussian_selection_epsilon(RandomRuns::poisson(3), 0, 1e-6).error().parameter == "mu");
  CHECK(gaussian_selection_epsilon(RandomRuns::poisson(3), 1, 0).error().parameter == "delta");
  CHECK(gaussian_selection_epsilon(RandomRuns::truncated_negative_binomial(-1, 0.5), 1, 1e-6)
            .error()
            .parameter == "eta");
}

TEST_CASE("selection: Brownian composition with the drift term (001 Thm 4, ERRATA 001 item 1)",
          "[privacy][selection][errata]") {
  // One mechanism stopped at t with V = 1/t = 100: L ~ N(V/2, V).
  const double v = 100, psi = *brownian_mixture_boundary(v, 1, 1e-6);
  check_reference(psi, 57.069, 3);
  const double printed_tail = normal_cdf(-(psi - v / 2) / std::sqrt(v));
  check_reference(printed_tail, 0.2398, 4);  // the printed claim says ≤ 1e-6
  CHECK(printed_tail > 1e-6);
  const double eps = *brownian_expost_epsilon(v, 1, 1e-6);
  const double corrected_tail = normal_cdf(-(eps - v / 2) / std::sqrt(v));
  CHECK(corrected_tail == Approx(5.75e-9).epsilon(1e-3));
  CHECK(corrected_tail <= 1e-6);
  CHECK(brownian_expost_epsilon(-1, 1, 1e-6).error().parameter == "v");
  CHECK(brownian_expost_epsilon(1, 0, 1e-6).error().parameter == "gamma");
  CHECK(brownian_expost_epsilon(1, 1, 1).error().parameter == "delta");
}

TEST_CASE("selection: bad parameters get named errors", "[privacy][selection]") {
  CHECK(gaussian_rnm_epsilon(1, 0.1, 1, 1).error().parameter == "candidates");
  CHECK(gaussian_rnm_epsilon(3, 2, 1, 1).error().parameter == "sensitivity");
  CHECK(gaussian_rnm_epsilon(3, 0.1, 0, 1).error().parameter == "sigma");
  CHECK(gaussian_rnm_epsilon(3, 0.1, 1, NAN).error().parameter == "range_width");
  CHECK(*gaussian_rnm_epsilon(3, 0, 1, 1) == 0);
  GaussianAboveThreshold at = unit_at(0, 0.5);
  CHECK(gaussian_at_alert_epsilon(at, 0, 0.1).error().parameter == "tick");
  CHECK(gaussian_at_silent_epsilon(at, 0, 0.1).error().parameter == "ticks");
  CHECK(gaussian_at_alert_epsilon(at, 1, -0.1).error().parameter == "sensitivity");
  at.threshold = 2;
  CHECK(gaussian_at_alert_epsilon(at, 1, 0.1).error().parameter == "threshold");
  at = unit_at(0, 0.5);
  at.sigma_query = -1;
  CHECK(gaussian_at_worst_slope(at, 3).error().parameter == "sigma_query");
  CHECK(gaussian_at_worst_slope(unit_at(0, 0.5), 2'000'000).error().parameter == "horizon");
  at = unit_at(0, 0.5);
  at.range_lo = 1;
  CHECK(gaussian_at_alert_slope(at, 3).error().parameter == "range");
}

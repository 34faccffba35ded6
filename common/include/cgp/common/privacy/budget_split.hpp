// Splitting a user's ρ over the c rounds of iterative elimination (paper §5.2, §7).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

enum class SplitSchedule {
  even,      // ρ/c each round
  doubling,  // ρ·2^{j−1}/(2^c − 1) in round j: early rounds cheap, late rounds precise
};

inline constexpr std::size_t kMaxRounds = 256;

// The c parts of ρ. Every part is > 0, and their sum — both the exact sum and the left-to-right
// double-precision sum — is ≤ ρ: floating-point rounding never overspends (budget_split.md).
// ρ > 0 finite, 1 ≤ c ≤ kMaxRounds.
Expected<std::vector<double>> split_budget(double rho, std::size_t rounds, SplitSchedule schedule);

// A geometric schedule for noise reduction (accuracy-first queries): parts r_j = first·g^(j−1)
// of `cap` for j = 1 .. max_rounds, stopping where the cap is reached — the last part is what is
// left, so the sum never exceeds the cap (exact and left-to-right, as split_budget). first = 0:
// cap·(g − 1)/(g^c − 1), the first part that spends the whole cap over max_rounds (g = 2 is
// split_budget's doubling, bit for bit). cap > 0 finite, growth > 1 finite, 0 ≤ first ≤ cap,
// 1 ≤ max_rounds ≤ kMaxRounds. Errors name "cap", "growth", "first" or "max_rounds".
Expected<std::vector<double>> geometric_split(double cap, double growth, std::size_t max_rounds,
                                              double first = 0);

// Noise reduction: the ρ a further release of a K-Lipschitz statistic must have so that the
// ρ-weighted running mean of all releases (total ρ̄ so far) has noise σ = K/√(2(ρ̄ + ρ)) ≤ sigma:
// K²/(2σ²) − ρ̄, rounded up (the target is met, never missed by rounding), 0 when ρ̄ already
// suffices. lipschitz, sigma > 0 finite; rho_bar ≥ 0 finite.
Expected<double> rho_to_reach_sigma(double lipschitz, double sigma, double rho_bar);

// "even" | "doubling" (also "double", as in cgp-sim's --split).
Expected<SplitSchedule> parse_split_schedule(std::string_view name);
std::string_view split_schedule_name(SplitSchedule schedule) noexcept;

}  // namespace cgp::privacy

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

// "even" | "doubling" (also "double", as in cgp-sim's --split).
Expected<SplitSchedule> parse_split_schedule(std::string_view name);
std::string_view split_schedule_name(SplitSchedule schedule) noexcept;

}  // namespace cgp::privacy

// Validation at the edge (DESIGN §6.1): one function per rule, each naming the parameter in
// its error. Messages read "rho must be finite and positive, got -1".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"

namespace cgp {

// Finite and > 0: privacy parameters, radii, bandwidths, budgets.
Status require_finite_positive(std::string_view parameter, double value);
// Finite (any sign): coordinates.
Status require_finite(std::string_view parameter, double value);
// Every element finite; the error names the first bad index, e.g. "point[3]".
Status require_all_finite(std::string_view parameter, std::span<const double> values);
// Open interval (lo, hi), finite.
Status require_open_interval(std::string_view parameter, double value, double lo, double hi);
// Whole number in [lo, hi].
Status require_count_in(std::string_view parameter, std::uint64_t value, std::uint64_t lo,
                        std::uint64_t hi);
// values.size() == expected.
Status require_dimension(std::string_view parameter, std::span<const double> values,
                         std::size_t expected);

// Builds an Error with a formatted value, for rules not covered above.
Error make_error(ErrorCode code, std::string_view parameter, std::string_view message);

// "name[index]", the way errors name an element ("point[3]", "polygon.holes[0]").
std::string indexed_name(std::string_view name, std::size_t index);

// Shortest round-trip text for a double, as it appears in error messages ("-1", "0.001", "nan").
std::string format_number(double value);

}  // namespace cgp

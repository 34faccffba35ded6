#include "cgp/common/privacy/device_charge.hpp"

#include "cgp/common/privacy/rounding.hpp"

namespace cgp::privacy {

double device_charge(double rho) noexcept {
  // (1 + 2^-10)² = 1 + 2^-9 + 2^-20: each product is exact (powers of two), two additions round.
  return pad_up(rho + rho * (2 * kGridSlack) + rho * (kGridSlack * kGridSlack));
}

}  // namespace cgp::privacy

#include "cgp/common/privacy/device_charge.hpp"

#include <cmath>

#include "cgp/common/privacy/rounding.hpp"

namespace cgp::privacy {

double device_charge(double rho) noexcept {
  // (1 + 2^-10)² = 1 + 2^-9 + 2^-20: each product is exact (powers of two), two additions round.
  return pad_up(rho + rho * (2 * kGridSlack) + rho * (kGridSlack * kGridSlack));
}

double rho_within_charge(double charge) noexcept {
  double rho = charge / ((1 + kGridSlack) * (1 + kGridSlack));
  // A few ulps of adjustment at most: device_charge rounds up by ~16 ulps.
  while (rho > 0 && device_charge(rho) > charge) rho = std::nextafter(rho, 0.0);
  return rho;
}

}  // namespace cgp::privacy

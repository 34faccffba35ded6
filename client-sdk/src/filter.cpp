#include "cgp/client/filter.hpp"

namespace cgp::client {

PrivacyFilter::PrivacyFilter(const DeviceConfig& config, double spent, bool halted)
    : capacity_(config.rho_capacity()),
      sticky_(config.sticky_halt()),
      spent_(spent),
      halted_(halted) {}

bool PrivacyFilter::halt_if_sticky() noexcept {
  if (!sticky_ || halted_) return false;
  halted_ = true;
  return true;
}

}  // namespace cgp::client

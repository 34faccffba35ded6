#include "cgp/client/filter.hpp"

namespace cgp::client {

bool PrivacyFilter::halt_if_sticky() noexcept {
  if (!sticky_ || halted_) return false;
  halted_ = true;
  return true;
}

}  // namespace cgp::client

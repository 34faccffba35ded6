#include "cgp/common/version.hpp"

namespace cgp {

std::string_view version_string() noexcept {
  return CGP_VERSION;
}

}  // namespace cgp

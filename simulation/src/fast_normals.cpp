#include "fast_normals.hpp"

#include <Random123/philox.h>
#include <Random123/boxmuller.hpp>

namespace cgp::simulation {

void fast_normals(std::uint64_t key, std::uint64_t stream, double* z, std::size_t count) noexcept {
  const r123::Philox2x64 philox;
  const r123::Philox2x64::key_type k = {{key}};
  for (std::size_t block = 0; 2 * block < count; ++block) {
    const r123::Philox2x64::ctr_type counter = {{stream, block}};
    const auto bits = philox(counter, k);
    const auto normal = r123::boxmuller(bits[0], bits[1]);
    z[2 * block] = normal.x;
    if (2 * block + 1 < count) z[2 * block + 1] = normal.y;
  }
}

}  // namespace cgp::simulation

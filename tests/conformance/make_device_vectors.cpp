// Writes protocol/conformance/device_vectors.json: the vector definitions with what the C++
// device decides for each. Run it when the device's rules change on purpose, and say so in the
// CHANGELOG: every other implementation is held to this file.
//   build/tests/cgp_make_device_vectors > protocol/conformance/device_vectors.json
#include <cstdio>
#include <exception>
#include <iostream>

#include "device_vectors.hpp"

int main() {
  try {
    nlohmann::json groups = cgp::conformance::device_vector_definitions();
    for (auto& group : groups) {
      const nlohmann::json expects = cgp::conformance::evaluate_group(group);
      for (std::size_t k = 0; k < expects.size(); ++k) group["cases"][k]["expect"] = expects[k];
    }
    const nlohmann::json file = {
        {"format", "cgpkit-device-conformance/1"},
        {"about",
         "Public requests and what a conformant device decides for each (docs/protocol.md §5). "
         "Per group: a fresh device with this capacity (CGP filter), sticky_halt and components, "
         "then the cases in order. Doubles are C99 hexadecimal. sigma2_grid is a decimal "
         "integer. grid_exponent and sigma2_grid are given for ANSWERED cases; the released "
         "values are then integer multiples of 2^grid_exponent."},
        {"groups", groups}};
    std::cout << file.dump(1) << '\n';
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cgp_make_device_vectors: %s\n", e.what());
    return 1;
  }
}

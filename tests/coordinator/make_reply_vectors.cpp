// Writes protocol/conformance/reply_vectors.json: the reply cases with what the C++ engine makes
// of each. Run it when the coordinator's rules change on purpose, and say so in the CHANGELOG.
//   build/tests/cgp_make_reply_vectors > protocol/conformance/reply_vectors.json
#include <cstdio>
#include <exception>
#include <iostream>

#include "reply_vectors.hpp"

int main() {
  try {
    nlohmann::json file = cgp::conformance::reply_vector_definitions();
    for (auto& c : file["cases"]) c["expect"] = cgp::conformance::evaluate_reply_case(file, c);
    std::cout << file.dump(1) << '\n';
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cgp_make_reply_vectors: %s\n", e.what());
    return 1;
  }
}

// Reply-validation vectors (share/cgpkit/conformance/reply_vectors.json): device replies and
// what a conformant coordinator makes of each — counted answered, refused, rejected or
// unanswered (and why), the charge it reports, and its budget mirror of the device after.
// docs/protocol.md §4 and §5.4 are the rules; the C++ engine wrote the file and a ctest holds
// it to it (a gateway or coordinator of another make is checked against the same file).
#pragma once

#include <nlohmann/json.hpp>

namespace cgp::conformance {

// The cases, without expectations: make_reply_vectors evaluates them and writes the file.
nlohmann::json reply_vector_definitions();

// What the C++ engine makes of one case: its "expect" object.
nlohmann::json evaluate_reply_case(const nlohmann::json& file, const nlohmann::json& c);

}  // namespace cgp::conformance

// Device conformance vectors (share/cgpkit/conformance/device_vectors.json): public requests and
// what a conformant device decides for each — status, error, the plan (grid exponent, σ² in
// grid units) and the exact charge and remaining budget. docs/protocol.md §5 is the rule; this
// C++ device is the reference that wrote the file, and a ctest holds it to the file.
#pragma once

#include <nlohmann/json.hpp>

namespace cgp::conformance {

// The vector groups as definitions (a device setup and its requests, in order), without
// expectations: make_device_vectors evaluates them and writes the file.
nlohmann::json device_vector_definitions();

// What the C++ device decides for each case of `group` (a fresh device per group; the cases in
// order on it): one "expect" object per case.
nlohmann::json evaluate_group(const nlohmann::json& group);

}  // namespace cgp::conformance

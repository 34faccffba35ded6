// cgpkit's version (CMake project(VERSION)), for --version, logs and Hello.sdk_version.
#pragma once

#include <string_view>

namespace cgp {

// "MAJOR.MINOR.PATCH", e.g. "0.2.0".
std::string_view version_string() noexcept;

}  // namespace cgp

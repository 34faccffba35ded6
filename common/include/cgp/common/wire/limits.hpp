// Size limits of the cgp.v1 protocol (documented in common/proto/cgp/v1/cgp.proto).
#pragma once

#include <cstddef>

#include "cgp/common/geometry/region.hpp"

namespace cgp::wire {

inline constexpr std::size_t kMaxMessageBytes = 1 << 20;
inline constexpr std::size_t kMaxDimension = geometry::kMaxDimension;
inline constexpr std::size_t kMaxPolygonVertices = geometry::kMaxPolygonVertices;
inline constexpr std::size_t kMaxPolygonHoles = geometry::kMaxPolygonHoles;
inline constexpr std::size_t kMaxIdBytes = 128;
inline constexpr std::size_t kMaxCredentialBytes = 4096;
inline constexpr unsigned kProtocolVersion = 1;

// The bytes an id on the connection may hold (device ids, sdk versions): safe in logs, file
// names and metric labels. A coordinator refuses a Hello with others.
constexpr bool is_id_char(unsigned char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == ':' || c == '@' || c == '/' || c == '+';
}

}  // namespace cgp::wire

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

}  // namespace cgp::wire

#include "cgp/common/geometry/signed_distance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cgp/common/validate.hpp"

namespace cgp::geometry {

double signed_distance(const Box& box, std::span<const double> point) noexcept {
  const auto lo = box.lo();
  const auto hi = box.hi();
  double outside2 = 0;
  double inside = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < point.size(); ++k) {
    double below = lo[k] - point[k];
    double above = point[k] - hi[k];
    double excess = std::max({below, above, 0.0});
    outside2 += excess * excess;
    inside = std::min(inside, std::min(-below, -above));
  }
  if (outside2 > 0) return std::sqrt(outside2);
  return inside > 0 ? -inside : 0.0;
}

double signed_distance(const Ball& ball, std::span<const double> point) noexcept {
  return euclidean_distance(point, ball.center()) - ball.radius();
}

double signed_distance(const Polygon& polygon, std::span<const double> point) noexcept {
  const double px = point[0], py = point[1];
  const Polygon::Edges& e = polygon.edges();
  const std::size_t n = e.size();
  double best2 = std::numeric_limits<double>::infinity();
  bool odd = false;  // even-odd crossing rule over all rings handles holes
  for (std::size_t k = 0; k < n; ++k) {
    const double ax = e.ax[k], ay = e.ay[k], bx = e.bx[k], by = e.by[k];
    const double dx = bx - ax, dy = by - ay;
    double t = ((px - ax) * dx + (py - ay) * dy) * e.inv_len2[k];
    t = std::clamp(t, 0.0, 1.0);
    const double ex = ax + t * dx - px, ey = ay + t * dy - py;
    best2 = std::min(best2, ex * ex + ey * ey);
    if ((ay > py) != (by > py) && px < ax + (py - ay) * dx / dy) odd = !odd;
  }
  const double d = std::sqrt(best2);
  if (d == 0) return 0.0;
  return odd ? -d : d;
}

double signed_distance(const Region& region, std::span<const double> point) noexcept {
  return std::visit([&](const auto& r) { return signed_distance(r, point); }, region);
}

Expected<double> checked_signed_distance(const Region& region, std::span<const double> point) {
  if (auto s = require_dimension("point", point, dimension(region)); !s) return s.error();
  if (auto s = require_all_finite("point", point); !s) return s.error();
  return signed_distance(region, point);
}

double euclidean_distance(std::span<const double> u, std::span<const double> p) noexcept {
  double sum2 = 0;
  for (std::size_t k = 0; k < u.size(); ++k) {
    double diff = u[k] - p[k];
    sum2 += diff * diff;
  }
  return std::sqrt(sum2);
}

Expected<double> checked_euclidean_distance(std::span<const double> u, std::span<const double> p) {
  if (auto s = require_dimension("point", u, p.size()); !s) return s.error();
  if (auto s = require_all_finite("point", u); !s) return s.error();
  if (auto s = require_all_finite("center", p); !s) return s.error();
  return euclidean_distance(u, p);
}

}  // namespace cgp::geometry

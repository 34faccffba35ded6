#include "cgp/common/geometry/signed_distance.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "cgp/common/validate.hpp"

namespace cgp::geometry {

namespace {

// std::min(a, b) and std::max(a, b), exactly (the same operand on ties such as ±0), without a
// branch. The time the device takes must not depend on where the user is (privatizer.md), and
// std::min/std::max do not promise that: with them g++ 12 -O2 compiled the polygon's clamp of t
// into two conditional jumps (it specialised t·dx for t = 0 and t = 1) and the box's max(…, 0)
// into jumps around the squares, and a user between a comb's teeth took measurably longer than
// one in a tooth (signed_distance.md "Timing"). With SSE2 arithmetic (every x86-64 build) these are
// one minsd/maxsd whatever the optimisation level: MINSD x, y gives x < y ? x : y (MAXSD: x > y),
// so b < a ? b : a is std::min(a, b). Inline assembly rather than _mm_min_sd: the intrinsic makes
// gcc 12 zero the upper lane (a movq per call, ~10% slower loops). Elsewhere the conditional
// expression that defines std::min/std::max, e.g. a conditional select on AArch64 (not verified).
[[gnu::always_inline]] inline double branchless_min(double a, double b) noexcept {
#if defined(__SSE2_MATH__) && defined(__AVX__)
  __asm__("vminsd %1, %0, %0" : "+x"(b) : "x"(a));
  return b;
#elif defined(__SSE2_MATH__)
  __asm__("minsd %1, %0" : "+x"(b) : "x"(a));
  return b;
#else
  return b < a ? b : a;
#endif
}
[[gnu::always_inline]] inline double branchless_max(double a, double b) noexcept {
#if defined(__SSE2_MATH__) && defined(__AVX__)
  __asm__("vmaxsd %1, %0, %0" : "+x"(b) : "x"(a));
  return b;
#elif defined(__SSE2_MATH__)
  __asm__("maxsd %1, %0" : "+x"(b) : "x"(a));
  return b;
#else
  return a < b ? b : a;
#endif
}

// The kinds' distances, inlined into both the one-point and the batch entry points (the same
// code, so the same bits). Inputs are finite (points and regions are validated), so the min and
// max above decide as fmin/fmax (a library call on x86-64) would.
[[gnu::always_inline]] inline double box_distance(const Box& box,
                                                  std::span<const double> point) noexcept {
  const auto lo = box.lo();
  const auto hi = box.hi();
  double outside2 = 0;
  double inside = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < point.size(); ++k) {
    const double below = lo[k] - point[k];
    const double above = point[k] - hi[k];
    const double excess = branchless_max(branchless_max(below, above), 0.0);
    outside2 += excess * excess;
    inside = branchless_min(inside, branchless_min(-below, -above));
  }
  // Both cases computed and added, no branch on where the user is: outside (some excess > 0)
  // the slack `inside` is negative, so max(inside, 0) = +0; inside, outside2 = +0. (The same bits
  // as selecting with outside2 > 0, which gcc compiled into a jump.) +0 on ∂Γ.
  return std::sqrt(outside2) - branchless_max(inside, 0.0) + 0.0;
}

[[gnu::always_inline]] inline double polygon_distance(const Polygon& polygon,
                                                      std::span<const double> point) noexcept {
  const double px = point[0], py = point[1];
  const Polygon::Edges& e = polygon.edges();
  const std::size_t n = e.size();
  double best2 = std::numeric_limits<double>::infinity();
  // Even-odd crossing rule over all rings (handles holes). The same instructions for every edge
  // and no branch on the point (the clamp and the minimum are minsd/maxsd, the comparisons set
  // bits): the time does not depend on where the user is (privatizer.md, signed_distance.md).
  unsigned odd = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double ax = e.ax[k], ay = e.ay[k], bx = e.bx[k], by = e.by[k];
    const double dx = bx - ax, dy = by - ay;
    double t = ((px - ax) * dx + (py - ay) * dy) * e.inv_len2[k];
    t = branchless_min(branchless_max(t, 0.0), 1.0);
    const double ex = ax + t * dx - px, ey = ay + t * dy - py;
    best2 = branchless_min(best2, ex * ex + ey * ey);
    // The crossing is left of the point iff px < ax + (py − ay)·dx/dy; multiplied out by dy
    // (sign flipped for dy < 0) there is no division, so a near-horizontal edge cannot turn the
    // test into ±inf or NaN. Products stay below 2^64 for coordinates within ±2^31.
    const unsigned straddles = static_cast<unsigned>(ay > py) ^ static_cast<unsigned>(by > py);
    const double cross = (px - ax) * dy - (py - ay) * dx;
    const unsigned left = static_cast<unsigned>(cross < 0) ^ static_cast<unsigned>(dy < 0);
    odd ^= straddles & left;
  }
  // +0 on the boundary; −d inside; d outside.
  const double sign = 1.0 - 2.0 * static_cast<double>(odd);
  return std::sqrt(best2) * sign + 0.0;
}

[[gnu::always_inline]] inline double kind_distance(const Box& box,
                                                   std::span<const double> point) noexcept {
  return box_distance(box, point);
}
[[gnu::always_inline]] inline double kind_distance(const Polygon& polygon,
                                                   std::span<const double> point) noexcept {
  return polygon_distance(polygon, point);
}
[[gnu::always_inline]] inline double kind_distance(const Ball& ball,
                                                   std::span<const double> point) noexcept {
  return euclidean_distance(point, ball.center()) - ball.radius();
}

#if defined(__x86_64__) && defined(__GNUC__)
// The batch kernels for d = 2 in vector form, written with intrinsics so that they are the same
// instructions at every optimisation level: no jump on a coordinate or distance, as the scalar
// code (signed_distance.md "Timing"). SSE2 (every x86-64 CPU) takes two points a step; where the
// CPU has AVX2, four. Each takes a count that is a multiple of 4 (vector_part); the rest, such
// as a device's one point, go through the scalar code.
//
// The same bits as the scalar code, select for select: branchless_max(a, b) is b > a ? b : a,
// which is MAXPD(b, a) (MAXPD(x, y) = x > y ? x : y, MINPD(x, y) = x < y ? x : y, lane by
// lane, y on ties such as ±0); −v is a flip of the sign bit, as gcc compiles the scalar
// negation; (0 + e₀²) + e₁² is e₀² + e₁² exactly; min(∞, t) = t for a finite t; and no
// product is fused into a sum (the file compiles with -ffp-contract=off, and the intrinsics
// name no FMA).
constexpr std::size_t vector_part(std::size_t count) noexcept {
  return count & ~std::size_t{3};
}

std::atomic<bool> baseline_only{false};  // detail::use_baseline_vectors
bool cpu_has_avx2() noexcept {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && !baseline_only.load(std::memory_order_relaxed);
}

// One step of box_distance for d = 2, on lanes of x and y (SSE2: two points; AVX2: four). A
// macro, not a function: with __m256d arguments a function outside the AVX2 code would change
// the calling convention (gcc's -Wpsabi), and each expansion is inside the one function that
// uses it.
#define CGP_BOX_STEP(P, x, y, lo0, lo1, hi0, hi1, result)                                         \
  do {                                                                                            \
    const auto zero_ = P##_setzero_pd(), sign_ = P##_set1_pd(-0.0);                               \
    const auto below0 = P##_sub_pd(lo0, x), above0 = P##_sub_pd(x, hi0);                          \
    const auto below1 = P##_sub_pd(lo1, y), above1 = P##_sub_pd(y, hi1);                          \
    const auto excess0 = P##_max_pd(zero_, P##_max_pd(above0, below0));                           \
    const auto excess1 = P##_max_pd(zero_, P##_max_pd(above1, below1));                           \
    const auto outside2 = P##_add_pd(P##_mul_pd(excess0, excess0), P##_mul_pd(excess1, excess1)); \
    const auto slack0 = P##_min_pd(P##_xor_pd(above0, sign_), P##_xor_pd(below0, sign_));         \
    const auto slack1 = P##_min_pd(P##_xor_pd(above1, sign_), P##_xor_pd(below1, sign_));         \
    const auto inside = P##_min_pd(slack1, slack0);                                               \
    result = P##_add_pd(P##_sub_pd(P##_sqrt_pd(outside2), P##_max_pd(zero_, inside)), zero_);     \
  } while (false)

// The AVX2 forms load points i .. i + 3 as (x, y) pairs; the unpacks give lanes in the order
// (i, i + 2, i + 1, i + 3), and the store's permute puts them back.
[[gnu::target("avx2")]] void box_distances_2d_avx2(const Box& box, const double* points,
                                                   std::size_t count, double* out) noexcept {
  const __m256d lo0 = _mm256_set1_pd(box.lo()[0]), lo1 = _mm256_set1_pd(box.lo()[1]);
  const __m256d hi0 = _mm256_set1_pd(box.hi()[0]), hi1 = _mm256_set1_pd(box.hi()[1]);
  for (std::size_t i = 0; i < count; i += 4) {
    const __m256d a = _mm256_loadu_pd(points + 2 * i), b = _mm256_loadu_pd(points + 2 * i + 4);
    const __m256d x = _mm256_unpacklo_pd(a, b), y = _mm256_unpackhi_pd(a, b);
    __m256d distance;
    CGP_BOX_STEP(_mm256, x, y, lo0, lo1, hi0, hi1, distance);
    _mm256_storeu_pd(out + i, _mm256_permute4x64_pd(distance, _MM_SHUFFLE(3, 1, 2, 0)));
  }
}
[[gnu::target("avx2")]] void euclidean_distances_2d_avx2(std::span<const double> p,
                                                         const double* points, std::size_t count,
                                                         double* out) noexcept {
  const __m256d p0 = _mm256_set1_pd(p[0]), p1 = _mm256_set1_pd(p[1]);
  for (std::size_t i = 0; i < count; i += 4) {
    const __m256d a = _mm256_loadu_pd(points + 2 * i), b = _mm256_loadu_pd(points + 2 * i + 4);
    const __m256d dx = _mm256_sub_pd(_mm256_unpacklo_pd(a, b), p0);
    const __m256d dy = _mm256_sub_pd(_mm256_unpackhi_pd(a, b), p1);
    const __m256d distance =
        _mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(dx, dx), _mm256_mul_pd(dy, dy)));
    _mm256_storeu_pd(out + i, _mm256_permute4x64_pd(distance, _MM_SHUFFLE(3, 1, 2, 0)));
  }
}

// The 2-D box's distances and the distances to p of points [0, count), count a multiple of 4:
// AVX2 where the CPU has it, else SSE2 two points a step.
void box_distances_2d(const Box& box, const double* points, std::size_t count,
                      double* out) noexcept {
  if (cpu_has_avx2()) return box_distances_2d_avx2(box, points, count, out);
  const __m128d lo0 = _mm_set1_pd(box.lo()[0]), lo1 = _mm_set1_pd(box.lo()[1]);
  const __m128d hi0 = _mm_set1_pd(box.hi()[0]), hi1 = _mm_set1_pd(box.hi()[1]);
  for (std::size_t i = 0; i < count; i += 2) {
    const __m128d a = _mm_loadu_pd(points + 2 * i), b = _mm_loadu_pd(points + 2 * i + 2);
    const __m128d x = _mm_unpacklo_pd(a, b), y = _mm_unpackhi_pd(a, b);
    __m128d distance;
    CGP_BOX_STEP(_mm, x, y, lo0, lo1, hi0, hi1, distance);
    _mm_storeu_pd(out + i, distance);
  }
}
void euclidean_distances_2d(std::span<const double> p, const double* points, std::size_t count,
                            double* out) noexcept {
  if (cpu_has_avx2()) return euclidean_distances_2d_avx2(p, points, count, out);
  const __m128d p0 = _mm_set1_pd(p[0]), p1 = _mm_set1_pd(p[1]);
  for (std::size_t i = 0; i < count; i += 2) {
    const __m128d a = _mm_loadu_pd(points + 2 * i), b = _mm_loadu_pd(points + 2 * i + 2);
    const __m128d dx = _mm_sub_pd(_mm_unpacklo_pd(a, b), p0);
    const __m128d dy = _mm_sub_pd(_mm_unpackhi_pd(a, b), p1);
    _mm_storeu_pd(out + i, _mm_sqrt_pd(_mm_add_pd(_mm_mul_pd(dx, dx), _mm_mul_pd(dy, dy))));
  }
}
#undef CGP_BOX_STEP
#else
// No vector kernels here: every point goes through the scalar code.
constexpr std::size_t vector_part(std::size_t) noexcept {
  return 0;
}
void box_distances_2d(const Box&, const double*, std::size_t, double*) noexcept {}
void euclidean_distances_2d(std::span<const double>, const double*, std::size_t, double*) noexcept {
}
#endif

}  // namespace

void detail::use_baseline_vectors([[maybe_unused]] bool baseline) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  baseline_only.store(baseline, std::memory_order_relaxed);
#endif
}

double signed_distance(const Box& box, std::span<const double> point) noexcept {
  return box_distance(box, point);
}

double signed_distance(const Ball& ball, std::span<const double> point) noexcept {
  return kind_distance(ball, point);
}

double signed_distance(const Polygon& polygon, std::span<const double> point) noexcept {
  return polygon_distance(polygon, point);
}

double signed_distance(const Region& region, std::span<const double> point) noexcept {
  return std::visit([&](const auto& r) { return signed_distance(r, point); }, region);
}

Expected<double> checked_signed_distance(const Region& region, std::span<const double> point) {
  CGP_RETURN_IF_ERROR(require_dimension("point", point, dimension(region)));
  CGP_RETURN_IF_ERROR(require_all_finite("point", point));
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

void signed_distances(const Region& region, const double* points, std::size_t count,
                      double* out) noexcept {
  const std::size_t d = dimension(region);
  std::visit(
      [&](const auto& r) {
        using Kind = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<Kind, Box>) {
          if (d == 2) {  // box_distance unrolled for d = 2: the same operations in the same order
            const double lo0 = r.lo()[0], lo1 = r.lo()[1], hi0 = r.hi()[0], hi1 = r.hi()[1];
            const std::size_t vectors = vector_part(count);
            box_distances_2d(r, points, vectors, out);
            for (std::size_t i = vectors; i < count; ++i) {
              const double x = points[2 * i], y = points[2 * i + 1];
              const double below0 = lo0 - x, above0 = x - hi0;
              const double below1 = lo1 - y, above1 = y - hi1;
              const double excess0 = branchless_max(branchless_max(below0, above0), 0.0);
              const double excess1 = branchless_max(branchless_max(below1, above1), 0.0);
              double outside2 = 0;
              outside2 += excess0 * excess0;
              outside2 += excess1 * excess1;
              double inside = std::numeric_limits<double>::infinity();
              inside = branchless_min(inside, branchless_min(-below0, -above0));
              inside = branchless_min(inside, branchless_min(-below1, -above1));
              out[i] = std::sqrt(outside2) - branchless_max(inside, 0.0) + 0.0;
            }
            return;
          }
        }
        for (std::size_t i = 0; i < count; ++i) out[i] = kind_distance(r, {points + i * d, d});
      },
      region);
}

void euclidean_distances(std::span<const double> p, const double* points, std::size_t count,
                         double* out) noexcept {
  const std::size_t d = p.size();
  if (d == 2) {  // the common case, unrolled: the same operations in the same order
    const double p0 = p[0], p1 = p[1];
    const std::size_t vectors = vector_part(count);
    euclidean_distances_2d(p, points, vectors, out);
    for (std::size_t i = vectors; i < count; ++i) {
      const double a = points[2 * i] - p0, b = points[2 * i + 1] - p1;
      double sum2 = 0;
      sum2 += a * a;
      sum2 += b * b;
      out[i] = std::sqrt(sum2);
    }
    return;
  }
  // Four users at a time, each summed in euclidean_distance's order (the same bits): one user's
  // sum is a chain of d dependent additions, so four chains side by side keep the adder busy
  // (d = 50: ~3× faster here).
  constexpr std::size_t kUsers = 4;
  std::size_t i = 0;
  for (; i + kUsers <= count; i += kUsers) {
    const double* x = points + i * d;
    double sum2[kUsers] = {};
    for (std::size_t k = 0; k < d; ++k)
      for (std::size_t j = 0; j < kUsers; ++j) {
        const double diff = x[j * d + k] - p[k];
        sum2[j] += diff * diff;
      }
    for (std::size_t j = 0; j < kUsers; ++j) out[i + j] = std::sqrt(sum2[j]);
  }
  for (; i < count; ++i) out[i] = euclidean_distance({points + i * d, d}, p);
}

Expected<double> checked_euclidean_distance(std::span<const double> u, std::span<const double> p) {
  CGP_RETURN_IF_ERROR(require_dimension("point", u, p.size()));
  CGP_RETURN_IF_ERROR(require_all_finite("point", u));
  CGP_RETURN_IF_ERROR(require_all_finite("center", p));
  return euclidean_distance(u, p);
}

std::size_t count_inside(const Region& region, const double* points, std::size_t count) noexcept {
  const std::size_t d = dimension(region);
  std::size_t inside = 0;
  if (const Box* box = std::get_if<Box>(&region)) {
    // box_distance < 0 iff no coordinate is outside (outside2 = 0) and the least slack is > 0,
    // i.e. lo[k] − x[k] < 0 and x[k] − hi[k] < 0 for every k; for finite doubles a − b < 0
    // exactly when a < b (a rounded difference keeps its sign, and is 0 only when a = b).
    const auto lo = box->lo();
    const auto hi = box->hi();
    if (d == 2) {  // unrolled: the same comparisons
      const double lo0 = lo[0], lo1 = lo[1], hi0 = hi[0], hi1 = hi[1];
      for (std::size_t i = 0; i < count; ++i) {
        const double x = points[2 * i], y = points[2 * i + 1];
        inside += static_cast<std::size_t>((lo0 < x) & (x < hi0) & (lo1 < y) & (y < hi1));
      }
      return inside;
    }
    for (std::size_t i = 0; i < count; ++i) {
      bool in = true;
      for (std::size_t k = 0; k < d; ++k) {
        const double x = points[i * d + k];
        in &= (lo[k] < x) & (x < hi[k]);  // no branch: points fall either way
      }
      inside += in;
    }
    return inside;
  }
  constexpr std::size_t kBlock = 256;
  double distance[kBlock];
  for (std::size_t first = 0; first < count; first += kBlock) {
    const std::size_t here = std::min(kBlock, count - first);
    signed_distances(region, points + first * d, here, distance);
    for (std::size_t i = 0; i < here; ++i) inside += distance[i] < 0;
  }
  return inside;
}

}  // namespace cgp::geometry

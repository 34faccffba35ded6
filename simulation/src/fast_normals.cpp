// Compiled once per instruction set by Highway's foreach_target; normal_pairs dispatches to the
// best one the CPU supports.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fast_normals.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
//
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "fast_normals.hpp"

HWY_BEFORE_NAMESPACE();
namespace cgp::simulation::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Philox4x32's words live in the low halves of 64-bit lanes, so that one 32×32 → 64 multiply
// (MulEven, which reads the low halves only) gives both the high and the low word of a product,
// as Random123's mulhilo32 does.
template <class D64, class V>
HWY_INLINE V product(D64 d64, V a, V b) {
#if HWY_TARGET == HWY_SCALAR
  const auto low32 = hn::Set(d64, 0xffffffffULL);
  return hn::And(a, low32) * hn::And(b, low32);  // one lane: a 64-bit multiply of the low words
#else
  const hn::Repartition<std::uint32_t, D64> d32;
  return hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, b));
#endif
}

// The generator's constants, set once per call.
template <class DU, class DD>
struct NormalConstants {
  explicit NormalConstants(DU du, DD dd, std::uint64_t stream)
      : low32(hn::Set(du, 0xffffffffULL)),
        m0(hn::Set(du, 0xD2511F53ULL)),
        m1(hn::Set(du, 0xCD9E8D57ULL)),
        w0(hn::Set(du, 0x9E3779B9ULL)),
        w1(hn::Set(du, 0xBB67AE85ULL)),
        stream_lo(hn::Set(du, stream & 0xffffffffULL)),
        stream_hi(hn::Set(du, stream >> 32)),
        two_pi(hn::Set(dd, 6.283185307179586476925286766559)),
        pi(hn::Set(dd, 3.141592653589793238462643383280)),
        ulp53(hn::Set(dd, 0x1p-53)),
        one(hn::Set(dd, 1.0)),
        minus_two(hn::Set(dd, -2.0)) {}
  hn::Vec<DU> low32, m0, m1, w0, w1, stream_lo, stream_hi;
  hn::Vec<DD> two_pi, pi, ulp53, one, minus_two;
};

// Philox4x32-10 of two vectors of (key, block) lanes at once: the ten rounds of each are a chain
// of dependent multiplies, so two chains side by side keep the multiplier busy (measured: a
// fifth less time per normal on AVX2 than one chain; four chains spill registers). Out: each
// vector's four words, the low 32 bits of each lane.
template <class DU, class C>
HWY_INLINE void PhiloxWords2(DU du, const C& c, hn::Vec<DU> key_a, hn::Vec<DU> block_a,
                             hn::Vec<DU> key_b, hn::Vec<DU> block_b, hn::Vec<DU> (&a)[4],
                             hn::Vec<DU> (&b)[4]) {
  // Only the low 32 bits of each lane are Philox's word; the high bits may carry garbage
  // (key carries, the high half of a product), which MulEven ignores and the end masks off.
  auto ka0 = key_a, ka1 = hn::ShiftRight<32>(key_a);
  auto kb0 = key_b, kb1 = hn::ShiftRight<32>(key_b);
  auto a0 = c.stream_lo, a1 = c.stream_hi, a2 = block_a, a3 = hn::Zero(du);
  auto b0 = c.stream_lo, b1 = c.stream_hi, b2 = block_b, b3 = hn::Zero(du);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      ka0 = hn::Add(ka0, c.w0), ka1 = hn::Add(ka1, c.w1);
      kb0 = hn::Add(kb0, c.w0), kb1 = hn::Add(kb1, c.w1);
    }
    const auto pa0 = product(du, c.m0, a0), pa1 = product(du, c.m1, a2);
    const auto pb0 = product(du, c.m0, b0), pb1 = product(du, c.m1, b2);
    a0 = hn::Xor3(hn::ShiftRight<32>(pa1), a1, ka0);
    b0 = hn::Xor3(hn::ShiftRight<32>(pb1), b1, kb0);
    a1 = pa1, b1 = pb1;  // their low words
    a2 = hn::Xor3(hn::ShiftRight<32>(pa0), a3, ka1);
    b2 = hn::Xor3(hn::ShiftRight<32>(pb0), b3, kb1);
    a3 = pa0, b3 = pb0;
  }
  a[0] = a0, a[1] = hn::And(a1, c.low32), a[2] = a2, a[3] = hn::And(a3, c.low32);
  b[0] = b0, b[1] = hn::And(b1, c.low32), b[2] = b2, b[3] = hn::And(b3, c.low32);
}

// The Box–Muller radius and angle of one vector's Philox words: z0 = radius·cos(angle),
// z1 = radius·sin(angle).
template <class DU, class DD, class C>
HWY_INLINE void RadiusAngle(DD dd, const C& c, const hn::Vec<DU> (&w)[4], hn::Vec<DD>& radius,
                            hn::Vec<DD>& angle) {
  const hn::RebindToSigned<DU> di;
  // 53 bits each: exact in a double, so the conversion is the same on every target.
  const auto bits1 = hn::ShiftRight<11>(hn::Or(hn::ShiftLeft<32>(w[0]), w[1]));
  const auto bits2 = hn::ShiftRight<11>(hn::Or(hn::ShiftLeft<32>(w[2]), w[3]));
  const auto u1 = hn::Mul(hn::Add(hn::ConvertTo(dd, hn::BitCast(di, bits1)), c.one), c.ulp53);
  const auto u2 = hn::Mul(hn::ConvertTo(dd, hn::BitCast(di, bits2)), c.ulp53);
  radius = hn::Sqrt(hn::Mul(c.minus_two, hn::Log(dd, u1)));
  angle = hn::Sub(hn::Mul(c.two_pi, u2), c.pi);
}

// Loads lanes i .. i + here of keys and blocks (blocks == nullptr: 0), zero-padded past here
// (here ≤ lanes; 0: all padding).
template <class DU>
HWY_INLINE void LoadItems(DU du, const std::uint64_t* HWY_RESTRICT keys,
                          const std::uint32_t* HWY_RESTRICT blocks, std::size_t i, std::size_t here,
                          hn::Vec<DU>& key, hn::Vec<DU>& block) {
  const hn::Rebind<std::uint32_t, DU> d32;  // one u32 per u64 lane, for blocks
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(std::uint64_t);
  const std::size_t lanes = hn::Lanes(du);
  if (here == lanes) {
    key = hn::LoadU(du, keys + i);
    block = blocks ? hn::PromoteTo(du, hn::LoadU(d32, blocks + i)) : hn::Zero(du);
    return;
  }
  HWY_ALIGN std::uint64_t key_buffer[kMaxLanes] = {};
  HWY_ALIGN std::uint64_t block_buffer[kMaxLanes] = {};
  for (std::size_t l = 0; l < here; ++l) {
    key_buffer[l] = keys[i + l];
    block_buffer[l] = blocks ? blocks[i + l] : 0;
  }
  key = hn::Load(du, key_buffer);
  block = hn::Load(du, block_buffer);
}

// The normals of items i .. i + here, two vectors of them (here ≤ 2·lanes; padded lanes are
// computed and ignored): z0[v] = r·cos θ, and z1[v] = r·sin θ when pairs, for vector v.
template <class DU, class DD, class C>
HWY_INLINE void NormalsAt(DU du, DD dd, const C& c, const std::uint64_t* HWY_RESTRICT keys,
                          const std::uint32_t* HWY_RESTRICT blocks, std::size_t i, std::size_t here,
                          bool pairs, hn::Vec<DD> (&z0)[2], hn::Vec<DD> (&z1)[2]) {
  const std::size_t lanes = hn::Lanes(du);
  hn::Vec<DU> key_a, block_a, key_b, block_b;
  LoadItems(du, keys, blocks, i, here < lanes ? here : lanes, key_a, block_a);
  LoadItems(du, keys, blocks, i + lanes, here > lanes ? here - lanes : 0, key_b, block_b);
  hn::Vec<DU> words_a[4], words_b[4];
  PhiloxWords2(du, c, key_a, block_a, key_b, block_b, words_a, words_b);
  hn::Vec<DD> radius_a, angle_a, radius_b, angle_b;
  RadiusAngle<DU>(dd, c, words_a, radius_a, angle_a);
  RadiusAngle<DU>(dd, c, words_b, radius_b, angle_b);
  z0[0] = hn::Mul(radius_a, hn::Cos(dd, angle_a));
  z0[1] = hn::Mul(radius_b, hn::Cos(dd, angle_b));
  if (pairs) {
    z1[0] = hn::Mul(radius_a, hn::Sin(dd, angle_a));
    z1[1] = hn::Mul(radius_b, hn::Sin(dd, angle_b));
  }
}

HWY_ATTR void NormalPairs(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                          const std::uint32_t* HWY_RESTRICT blocks, std::size_t count,
                          double* HWY_RESTRICT out, bool pairs) {
  const hn::ScalableTag<std::uint64_t> du;
  const hn::ScalableTag<double> dd;
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(du), step = 2 * lanes, per_item = pairs ? 2 : 1;
  const NormalConstants c(du, dd, stream);
  HWY_ALIGN double result[4 * kMaxLanes];
  for (std::size_t i = 0; i < count; i += step) {
    // Each lane is computed from its own inputs only: a short last step is padded, never
    // computed differently.
    const std::size_t here = count - i < step ? count - i : step;
    hn::Vec<decltype(dd)> z0[2] = {hn::Zero(dd), hn::Zero(dd)},
                          z1[2] = {hn::Zero(dd), hn::Zero(dd)};
    NormalsAt(du, dd, c, keys, blocks, i, here, pairs, z0, z1);
    double* to = here == step ? out + per_item * i : result;
    for (std::size_t v = 0; v < 2; ++v) {
      if (pairs)
        hn::StoreInterleaved2(z0[v], z1[v], dd, to + 2 * v * lanes);
      else
        hn::StoreU(z0[v], dd, to + v * lanes);
    }
    if (here < step)
      for (std::size_t l = 0; l < per_item * here; ++l) out[per_item * i + l] = result[l];
  }
}

// client::round_half_away of integers-or-fractions v (|v| ≤ 2^56), in doubles: exact, since the
// result is an integer of at most 56 bits that v's own exponent range holds.
template <class DD>
HWY_INLINE hn::Vec<DD> RoundHalfAway(DD dd, hn::Vec<DD> v) {
  const auto whole = hn::Trunc(v);
  const auto fraction = hn::Sub(v, whole);  // exact
  const auto one = hn::Set(dd, 1.0);
  const auto up = hn::IfThenElseZero(hn::Ge(fraction, hn::Set(dd, 0.5)), one);
  const auto down = hn::IfThenElseZero(hn::Le(fraction, hn::Set(dd, -0.5)), one);
  return hn::Sub(hn::Add(whole, up), down);
}

// privatize_with_normals(φ, plan, z) with z = normal_pairs(stream, keys, blocks, count, ·,
// pairs), without z in memory: the same values bit for bit (fast_normals.hpp).
// Lanes i .. i + here of an item's plan values (here < lanes: padded with the last one).
template <class DD>
HWY_INLINE hn::Vec<DD> LoadPlanValues(DD dd, const double* HWY_RESTRICT values, std::size_t i,
                                      std::size_t here) {
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  if (here == hn::Lanes(dd)) return hn::LoadU(dd, values + i);
  HWY_ALIGN double buffer[kMaxLanes];
  for (std::size_t l = 0; l < hn::Lanes(dd); ++l) buffer[l] = values[i + (l < here ? l : here - 1)];
  return hn::Load(dd, buffer);
}

// The plan of PrivatizeNormals' items: one for all (arrays null) or each item's own.
struct ItemPlans {
  double sigma_grid = 0, scale = 0, grid = 0;
  const double *sigmas = nullptr, *scales = nullptr, *grids = nullptr;
};

HWY_ATTR void PrivatizeNormalsWith(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                                   const std::uint32_t* HWY_RESTRICT blocks, std::size_t count,
                                   bool pairs, const double* HWY_RESTRICT phi,
                                   const ItemPlans& plans, double* HWY_RESTRICT out) {
  const hn::ScalableTag<std::uint64_t> du;
  const hn::ScalableTag<double> dd;
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(du);
  const NormalConstants c(du, dd, stream);
  auto sigma = hn::Set(dd, plans.sigma_grid), to_grid = hn::Set(dd, plans.scale),
       from_grid = hn::Set(dd, plans.grid);
  const auto limit = hn::Set(dd, 0x1p56), minus_limit = hn::Set(dd, -0x1p56);
  // One value: grid_units(φ) + round_half_away(σ·z), as a double (the integer sum rounded once,
  // as its conversion rounds it), times u.
  const auto release = [&](hn::Vec<decltype(dd)> value, hn::Vec<decltype(dd)> z) {
    auto v = hn::Mul(value, to_grid);
    v = hn::IfThenElse(hn::Gt(v, minus_limit), v, minus_limit);  // NaN → −2^56, as grid_units
    v = hn::IfThenElse(hn::Lt(v, limit), v, limit);
    const auto noise = RoundHalfAway(dd, hn::Mul(sigma, z));
    return hn::Mul(hn::Add(RoundHalfAway(dd, v), noise), from_grid);
  };
  HWY_ALIGN double buffer[4 * kMaxLanes] = {};
  HWY_ALIGN double result[4 * kMaxLanes];
  const std::size_t per_item = pairs ? 2 : 1, step = 2 * lanes;
  for (std::size_t i = 0; i < count; i += step) {
    const std::size_t here = count - i < step ? count - i : step;
    hn::Vec<decltype(dd)> z0[2] = {hn::Zero(dd), hn::Zero(dd)},
                          z1[2] = {hn::Zero(dd), hn::Zero(dd)};
    NormalsAt(du, dd, c, keys, blocks, i, here, pairs, z0, z1);
    const double* in = phi + per_item * i;
    if (here < step) {  // a short last step: padded copies in and out
      for (std::size_t l = 0; l < per_item * here; ++l) buffer[l] = in[l];
      in = buffer;
    }
    double* to = here == step ? out + per_item * i : result;
    for (std::size_t v = 0; v < 2 && v * lanes < here; ++v) {
      const std::size_t first = v * lanes, here_v = here - first < lanes ? here - first : lanes;
      if (plans.sigmas) {
        sigma = LoadPlanValues(dd, plans.sigmas, i + first, here_v);
        to_grid = LoadPlanValues(dd, plans.scales, i + first, here_v);
        from_grid = LoadPlanValues(dd, plans.grids, i + first, here_v);
      }
      if (pairs) {
        hn::Vec<decltype(dd)> phi0, phi1;
        hn::LoadInterleaved2(dd, in + 2 * first, phi0, phi1);
        hn::StoreInterleaved2(release(phi0, z0[v]), release(phi1, z1[v]), dd, to + 2 * first);
      } else {
        hn::StoreU(release(hn::LoadU(dd, in + first), z0[v]), dd, to + first);
      }
    }
    if (here < step)
      for (std::size_t l = 0; l < per_item * here; ++l) out[per_item * i + l] = result[l];
  }
}

HWY_ATTR void PrivatizeNormals(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                               const std::uint32_t* HWY_RESTRICT blocks, std::size_t count,
                               bool pairs, const double* HWY_RESTRICT phi, double sigma_grid,
                               double scale, double grid, double* HWY_RESTRICT out) {
  PrivatizeNormalsWith(stream, keys, blocks, count, pairs, phi,
                       ItemPlans{sigma_grid, scale, grid, nullptr, nullptr, nullptr}, out);
}

HWY_ATTR void PrivatizeNormalsEach(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                                   const std::uint32_t* HWY_RESTRICT blocks, std::size_t count,
                                   bool pairs, const double* HWY_RESTRICT phi,
                                   const double* HWY_RESTRICT sigma_grid,
                                   const double* HWY_RESTRICT scale,
                                   const double* HWY_RESTRICT grid, double* HWY_RESTRICT out) {
  PrivatizeNormalsWith(stream, keys, blocks, count, pairs, phi,
                       ItemPlans{0, 0, 0, sigma_grid, scale, grid}, out);
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace cgp::simulation::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgp::simulation {

HWY_EXPORT(NormalPairs);
HWY_EXPORT(PrivatizeNormals);
HWY_EXPORT(PrivatizeNormalsEach);
HWY_EXPORT(TargetName);

void normal_pairs(std::uint64_t stream, const std::uint64_t* keys, const std::uint32_t* blocks,
                  std::size_t count, double* out, bool pairs) noexcept {
  HWY_DYNAMIC_DISPATCH(NormalPairs)(stream, keys, blocks, count, out, pairs);
}

void privatize_normals(std::uint64_t stream, const std::uint64_t* keys, const std::uint32_t* blocks,
                       std::size_t count, bool pairs, const double* phi, double sigma_grid,
                       double scale, double grid, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(PrivatizeNormals)
  (stream, keys, blocks, count, pairs, phi, sigma_grid, scale, grid, out);
}

void privatize_normals_each(std::uint64_t stream, const std::uint64_t* keys,
                            const std::uint32_t* blocks, std::size_t count, bool pairs,
                            const double* phi, const double* sigma_grid, const double* scale,
                            const double* grid, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(PrivatizeNormalsEach)
  (stream, keys, blocks, count, pairs, phi, sigma_grid, scale, grid, out);
}

const char* normal_pairs_target() noexcept {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

std::array<std::uint32_t, 4> philox_words(std::uint64_t key, std::uint64_t stream,
                                          std::uint32_t block) noexcept {
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  std::array<std::uint32_t, 4> c = {static_cast<std::uint32_t>(stream),
                                    static_cast<std::uint32_t>(stream >> 32), block, 0};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += 0x9E3779B9U, k1 += 0xBB67AE85U;
    const std::uint64_t p0 = std::uint64_t{0xD2511F53U} * c[0];
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57U} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
  }
  return c;
}

}  // namespace cgp::simulation
#endif  // HWY_ONCE

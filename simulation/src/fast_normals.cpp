// Compiled once per instruction set by Highway's foreach_target; normal_pairs dispatches to the
// best one the CPU supports.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fast_normals.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
//
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
#include <algorithm>

#include "fast_normals.hpp"

HWY_BEFORE_NAMESPACE();
namespace cgp::simulation::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The generator's constants, set once per call: ARS-7's round keys for the stream (the same
// for every item: the item is the counter), and Box–Muller's.
template <class DU, class DD>
struct NormalConstants {
  explicit NormalConstants(DU, DD dd, std::uint64_t stream_id)
      : stream(stream_id),
        octant_unit(hn::Set(dd, 0.78539816339744830961566084581988 * 0x1p-49)),
        two52(hn::Set(dd, 0x1p52)),
        two(hn::Set(dd, 2.0)),
        minus_two(hn::Set(dd, -2.0)) {
#if HWY_TARGET != HWY_SCALAR  // one lane: ArsBits2 runs the scalar ars_words
    const auto keys = ars_round_keys(stream_id);
    const hn::Full128<std::uint64_t> d128;
    for (std::size_t r = 0; r < kArsRounds + 1; ++r)
      round_key[r] = hn::BitCast(
          hn::Repartition<std::uint8_t, decltype(d128)>(),
          hn::InterleaveLower(d128, hn::Set(d128, keys[r][0]), hn::Set(d128, keys[r][1])));
#endif
  }
  std::uint64_t stream;
#if HWY_TARGET != HWY_SCALAR
  hn::Vec<hn::Full128<std::uint8_t>> round_key[kArsRounds + 1];  // one 128-bit block each
#endif
  hn::Vec<DD> octant_unit, two52, two, minus_two;  // π/4·2^-49: y's unit
};

#if HWY_TARGET != HWY_SCALAR
using D128 = hn::Full128<std::uint64_t>;

// The 128-bit blocks of v, lowest first, into pieces[0 .. MaxLanes(d)/2).
template <class D>
HWY_INLINE void SplitBlocks(D d, hn::Vec<D> v, hn::Vec<D128>* pieces) {
  if constexpr (hn::MaxLanes(D()) <= 2) {
    (void)d;
    pieces[0] = v;
  } else {
    const hn::Half<D> half;
    SplitBlocks(half, hn::LowerHalf(half, v), pieces);
    SplitBlocks(half, hn::UpperHalf(half, v), pieces + hn::MaxLanes(half) / 2);
  }
}
// SplitBlocks' inverse.
template <class D>
HWY_INLINE hn::Vec<D> JoinBlocks(D d, const hn::Vec<D128>* pieces) {
  if constexpr (hn::MaxLanes(D()) <= 2) {
    (void)d;
    return pieces[0];
  } else {
    const hn::Half<D> half;
    return hn::Combine(d, JoinBlocks(half, pieces + hn::MaxLanes(half) / 2),
                       JoinBlocks(half, pieces));
  }
}

// ARS-7 of each lane's item, the counter (key, block), under the stream's round keys, for two
// vectors of items (a, b): each output's low and high 64 bits. A counter fills one 128-bit block;
// the AES rounds run on one block each (a wider vector would split and join its blocks every
// round on targets without wide AES), every item its own chain, side by side.
template <class DU, class C>
HWY_INLINE void ArsBits2(DU du, const C& c, hn::Vec<DU> key_a, hn::Vec<DU> block_a,
                         hn::Vec<DU> key_b, hn::Vec<DU> block_b, hn::Vec<DU>& low_a,
                         hn::Vec<DU>& high_a, hn::Vec<DU>& low_b, hn::Vec<DU>& high_b) {
  constexpr std::size_t kBlocks = hn::MaxLanes(DU()) / 2;  // per vector
  const D128 d128;
  const hn::Repartition<std::uint8_t, D128> d8;
  hn::Vec<D128> keys[2 * kBlocks], blocks[2 * kBlocks];
  SplitBlocks(du, key_a, keys), SplitBlocks(du, key_b, keys + kBlocks);
  SplitBlocks(du, block_a, blocks), SplitBlocks(du, block_b, blocks + kBlocks);
  hn::Vec<decltype(d8)> state[4 * kBlocks];  // item 2p + h: half h of piece p
  for (std::size_t p = 0; p < 2 * kBlocks; ++p) {
    state[2 * p] =
        hn::Xor(hn::BitCast(d8, hn::InterleaveLower(d128, keys[p], blocks[p])), c.round_key[0]);
    state[2 * p + 1] =
        hn::Xor(hn::BitCast(d8, hn::InterleaveUpper(d128, keys[p], blocks[p])), c.round_key[0]);
  }
  for (std::size_t r = 1; r < kArsRounds; ++r)
    for (auto& s : state) s = hn::AESRound(s, c.round_key[r]);
  for (auto& s : state) s = hn::AESLastRound(s, c.round_key[kArsRounds]);
  hn::Vec<D128> low[2 * kBlocks], high[2 * kBlocks];
  for (std::size_t p = 0; p < 2 * kBlocks; ++p) {
    const auto first = hn::BitCast(d128, state[2 * p]),
               second = hn::BitCast(d128, state[2 * p + 1]);
    low[p] = hn::InterleaveLower(d128, first, second);
    high[p] = hn::InterleaveUpper(d128, first, second);
  }
  low_a = JoinBlocks(du, low), high_a = JoinBlocks(du, high);
  low_b = JoinBlocks(du, low + kBlocks), high_b = JoinBlocks(du, high + kBlocks);
}
#else
// One lane: the portable ars_words.
template <class DU, class C>
HWY_INLINE void ArsBits2(DU du, const C& c, hn::Vec<DU> key_a, hn::Vec<DU> block_a,
                         hn::Vec<DU> key_b, hn::Vec<DU> block_b, hn::Vec<DU>& low_a,
                         hn::Vec<DU>& high_a, hn::Vec<DU>& low_b, hn::Vec<DU>& high_b) {
  const auto a =
      ars_words(hn::GetLane(key_a), c.stream, static_cast<std::uint32_t>(hn::GetLane(block_a)));
  const auto b =
      ars_words(hn::GetLane(key_b), c.stream, static_cast<std::uint32_t>(hn::GetLane(block_b)));
  low_a = hn::Set(du, a[0]), high_a = hn::Set(du, a[1]);
  low_b = hn::Set(du, b[0]), high_b = hn::Set(du, b[1]);
}
#endif

// sin y and cos y for y ∈ [0, π/4]: fdlibm's kernels (__kernel_sin, __kernel_cos: within 1 ulp
// of glibc's sin and cos of y there, measured over 10^6 points; ctest holds the normals to 1e-13
// of a glibc reference).
template <class DD>
HWY_INLINE void SinCosKernel(DD dd, hn::Vec<DD> y, hn::Vec<DD>& sine, hn::Vec<DD>& cosine) {
  const auto z = hn::Mul(y, y);
  auto s = hn::Set(dd, 1.58969099521155010221e-10);
  s = hn::MulAdd(s, z, hn::Set(dd, -2.50507602534068634195e-08));
  s = hn::MulAdd(s, z, hn::Set(dd, 2.75573137070700676789e-06));
  s = hn::MulAdd(s, z, hn::Set(dd, -1.98412698298579493134e-04));
  s = hn::MulAdd(s, z, hn::Set(dd, 8.33333333332248946124e-03));
  s = hn::MulAdd(s, z, hn::Set(dd, -1.66666666666666324348e-01));
  sine = hn::MulAdd(hn::Mul(y, z), s, y);
  auto c = hn::Set(dd, -1.13596475577881948265e-11);
  c = hn::MulAdd(c, z, hn::Set(dd, 2.08757232129817482790e-09));
  c = hn::MulAdd(c, z, hn::Set(dd, -2.75573143513906633035e-07));
  c = hn::MulAdd(c, z, hn::Set(dd, 2.48015872894767294178e-05));
  c = hn::MulAdd(c, z, hn::Set(dd, -1.38888888888741095749e-03));
  c = hn::MulAdd(c, z, hn::Set(dd, 4.16666666666666019037e-02));
  // 1 − (z/2 − z²·c)
  cosine = hn::Sub(hn::Set(dd, 1.0), hn::NegMulAdd(hn::Mul(z, z), c, hn::Mul(hn::Set(dd, 0.5), z)));
}

// Box–Muller of one vector's generator bits (normal_pairs' definition): z0 = r·cos θ and, when
// pairs, z1 = r·sin θ. The angle is a 52-bit fraction of a turn, so its reduction is exact
// integer work: the top three bits pick the octant, the other 49 the offset y ∈ [0, π/4] from
// the octant's nearer end (odd octants count down from their upper end), and cos θ, sin θ are
// ±cos y, ±sin y swapped by quadrant.
template <class DU, class DD, class C>
HWY_INLINE void BoxMuller(DU du, DD dd, const C& c, hn::Vec<DU> low, hn::Vec<DU> high, bool pairs,
                          hn::Vec<DD>& z0, hn::Vec<DD>& z1) {
  // u₁ = 2 − (1 + (low >> 12)·2^-52) ∈ (0, 1]: 52 bits as the mantissa of a double in [1, 2),
  // exact and the same on every target.
  const auto one_bits = hn::Set(du, 0x3FF0000000000000ULL);
  const auto u1 = hn::Sub(c.two, hn::BitCast(dd, hn::Or(hn::ShiftRight<12>(low), one_bits)));
  const auto radius = hn::Sqrt(hn::Mul(c.minus_two, hn::Log(dd, u1)));
  const auto turn = hn::ShiftRight<12>(high);  // θ = 2π·turn·2^-52
  const auto bit = hn::Set(du, 1);
  const auto odd = hn::And(hn::ShiftRight<49>(turn), bit);
  const auto offset_mask = hn::Set(du, (std::uint64_t{1} << 49) - 1);
  const auto offset = hn::And(turn, offset_mask);
  // y's 2^-49 units: the offset, or 2^49 − offset in an odd octant (exact, ≤ 2^49).
  const auto units = hn::IfThenElse(hn::RebindMask(du, hn::Eq(odd, bit)),
                                    hn::Sub(hn::Set(du, std::uint64_t{1} << 49), offset), offset);
  // units < 2^52 as a double, exactly: the mantissa of 2^52 + units, minus 2^52.
  const auto two52_bits = hn::Set(du, 0x4330000000000000ULL);
  const auto y =
      hn::Mul(hn::Sub(hn::BitCast(dd, hn::Or(units, two52_bits)), c.two52), c.octant_unit);
  hn::Vec<DD> sine, cosine;
  SinCosKernel(dd, y, sine, cosine);
  // θ = Q·π/2 ± y, Q = (octant + odd)/2 mod 4: (cos θ, sin θ) = (C, ±S), (∓S, C), (−C, ∓S) or
  // (±S, −C) for Q = 0, 1, 2, 3, with ±S = S in even octants and −S in odd ones.
  const auto quadrant = hn::ShiftRight<1>(hn::Add(hn::ShiftRight<49>(turn), odd));
  const auto signed_sine = hn::Xor(sine, hn::BitCast(dd, hn::ShiftLeft<63>(odd)));
  const auto swap = hn::RebindMask(dd, hn::Eq(hn::And(quadrant, bit), bit));
  const auto first = hn::IfThenElse(swap, signed_sine, cosine);
  const auto second = hn::IfThenElse(swap, cosine, signed_sine);
  // cos θ < 0 for Q ∈ {1, 2}: bit 1 of Q + 1; sin θ < 0 for Q ∈ {2, 3}: bit 1 of Q.
  const auto cos_sign = hn::BitCast(dd, hn::ShiftLeft<62>(hn::Add(quadrant, bit)));
  const auto sign_bit = hn::BitCast(dd, hn::Set(du, std::uint64_t{1} << 63));
  z0 = hn::Mul(radius, hn::Xor(first, hn::And(cos_sign, sign_bit)));
  if (pairs) {
    const auto sin_sign = hn::BitCast(dd, hn::ShiftLeft<62>(quadrant));
    z1 = hn::Mul(radius, hn::Xor(second, hn::And(sin_sign, sign_bit)));
  }
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
  hn::Vec<DU> low_a, high_a, low_b, high_b;
  ArsBits2(du, c, key_a, block_a, key_b, block_b, low_a, high_a, low_b, high_b);
  BoxMuller(du, dd, c, low_a, high_a, pairs, z0[0], z1[0]);
  BoxMuller(du, dd, c, low_b, high_b, pairs, z0[1], z1[1]);
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

// One value of privatize_with_normals(φ, plan, z): grid_units(φ) + round_half_away(σ·z), as a
// double (the integer sum rounded once, as its conversion rounds it), times u.
template <class DD>
HWY_INLINE hn::Vec<DD> ReleaseValue(DD dd, hn::Vec<DD> value, hn::Vec<DD> z, hn::Vec<DD> sigma,
                                    hn::Vec<DD> to_grid, hn::Vec<DD> from_grid) {
  const auto limit = hn::Set(dd, 0x1p56), minus_limit = hn::Set(dd, -0x1p56);
  auto v = hn::Mul(value, to_grid);
  v = hn::IfThenElse(hn::Gt(v, minus_limit), v, minus_limit);  // NaN → −2^56, as grid_units
  v = hn::IfThenElse(hn::Lt(v, limit), v, limit);
  const auto noise = RoundHalfAway(dd, hn::Mul(sigma, z));
  return hn::Mul(hn::Add(RoundHalfAway(dd, v), noise), from_grid);
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
  const auto release = [&](hn::Vec<decltype(dd)> value, hn::Vec<decltype(dd)> z) {
    return ReleaseValue(dd, value, z, sigma, to_grid, from_grid);
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

// privatize_normal_halves item by item, without looking for partners: each item's pair at
// counter (key & ~1, block 0), and its half by the key's last bit. The same values as through
// shared pairs, at one pair an item: for batches where few partners sit side by side.
HWY_ATTR void PrivatizeHalvesDirect(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                                    std::size_t count, const double* HWY_RESTRICT phi,
                                    double sigma_grid, double scale, double grid,
                                    const double* HWY_RESTRICT sigma_grids,
                                    const double* HWY_RESTRICT scales,
                                    const double* HWY_RESTRICT grids, double* HWY_RESTRICT out) {
  const hn::ScalableTag<std::uint64_t> du;
  const hn::ScalableTag<double> dd;
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(du), step = 2 * lanes;
  const NormalConstants c(du, dd, stream);
  const ItemPlans plans{sigma_grid, scale, grid, sigma_grids, scales, grids};
  auto sigma = hn::Set(dd, plans.sigma_grid), to_grid = hn::Set(dd, plans.scale),
       from_grid = hn::Set(dd, plans.grid);
  const auto counter_mask = hn::Set(du, ~std::uint64_t{1}), bit = hn::Set(du, 1);
  HWY_ALIGN double buffer[2 * kMaxLanes] = {};
  HWY_ALIGN double result[2 * kMaxLanes];
  for (std::size_t i = 0; i < count; i += step) {
    const std::size_t here = count - i < step ? count - i : step;
    hn::Vec<decltype(du)> key[2], block[2];
    LoadItems(du, keys, nullptr, i, here < lanes ? here : lanes, key[0], block[0]);
    LoadItems(du, keys, nullptr, i + lanes, here > lanes ? here - lanes : 0, key[1], block[1]);
    hn::Vec<decltype(du)> low[2], high[2];
    ArsBits2(du, c, hn::And(key[0], counter_mask), block[0], hn::And(key[1], counter_mask),
             block[1], low[0], high[0], low[1], high[1]);
    const double* in = phi + i;
    if (here < step) {  // a short last step: padded copies in and out
      for (std::size_t l = 0; l < here; ++l) buffer[l] = in[l];
      in = buffer;
    }
    double* to = here == step ? out + i : result;
    for (std::size_t v = 0; v < 2 && v * lanes < here; ++v) {
      const std::size_t first = v * lanes, here_v = here - first < lanes ? here - first : lanes;
      hn::Vec<decltype(dd)> z0, z1;
      BoxMuller(du, dd, c, low[v], high[v], true, z0, z1);
      const auto odd = hn::RebindMask(dd, hn::Eq(hn::And(key[v], bit), bit));
      if (plans.sigmas) {
        sigma = LoadPlanValues(dd, plans.sigmas, i + first, here_v);
        to_grid = LoadPlanValues(dd, plans.scales, i + first, here_v);
        from_grid = LoadPlanValues(dd, plans.grids, i + first, here_v);
      }
      hn::StoreU(ReleaseValue(dd, hn::LoadU(dd, in + first), hn::IfThenElse(odd, z1, z0), sigma,
                              to_grid, from_grid),
                 dd, to + first);
    }
    if (here < step)
      for (std::size_t l = 0; l < here; ++l) out[i + l] = result[l];
  }
}

// out[i] = privatize_with_normals(φ[i], plan, z[i]) for count items, one value each.
HWY_ATTR void ReleaseWithNormals(const double* HWY_RESTRICT z, const double* HWY_RESTRICT phi,
                                 std::size_t count, double sigma_grid, double scale, double grid,
                                 double* HWY_RESTRICT out) {
  const hn::ScalableTag<double> dd;
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(dd);
  const auto sigma = hn::Set(dd, sigma_grid), to_grid = hn::Set(dd, scale),
             from_grid = hn::Set(dd, grid);
  for (std::size_t i = 0; i < count; i += lanes) {
    const std::size_t here = count - i < lanes ? count - i : lanes;
    if (here == lanes) {
      hn::StoreU(
          ReleaseValue(dd, hn::LoadU(dd, phi + i), hn::LoadU(dd, z + i), sigma, to_grid, from_grid),
          dd, out + i);
      continue;
    }
    // A short last step: padded copies in and out (padding lanes are computed and dropped).
    HWY_ALIGN double phi_buffer[kMaxLanes] = {}, z_buffer[kMaxLanes] = {}, result[kMaxLanes];
    for (std::size_t l = 0; l < here; ++l) phi_buffer[l] = phi[i + l], z_buffer[l] = z[i + l];
    hn::Store(ReleaseValue(dd, hn::Load(dd, phi_buffer), hn::Load(dd, z_buffer), sigma, to_grid,
                           from_grid),
              dd, result);
    for (std::size_t l = 0; l < here; ++l) out[i + l] = result[l];
  }
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
HWY_EXPORT(ReleaseWithNormals);
HWY_EXPORT(PrivatizeHalvesDirect);
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

namespace {

// Partners' halves for one block of n ≤ kHalvesBlock items, without allocating: the block's
// distinct counters (partners side by side share one), one pair each, and each item's half of
// its counter's pair, into z[0 .. n). Callers go a block at a time; a pair whose partners fall
// in two blocks is computed in each, with the same values (an item's depend on its key only).
constexpr std::size_t kHalvesBlock = 256;
static_assert(2 * kHalvesBlock <= 65536, "an item's index into its block's pairs is 16 bits");
void shared_halves(std::uint64_t stream, const std::uint64_t* keys, std::size_t n, double* z) {
  std::uint64_t counters[kHalvesBlock];
  std::uint16_t half[kHalvesBlock];  // the item's index into pairs: 2·counter + (key & 1)
  // Without a branch per item (whether a partner follows is a coin toss to the predictor): each
  // counter is written at the next free place, which moves on only when it is new.
  std::size_t distinct = 0;
  std::uint64_t last = 1;  // odd: never a counter
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t key = keys[i], counter = key & ~std::uint64_t{1};
    counters[distinct] = counter;
    distinct += counter != last;
    last = counter;
    half[i] = static_cast<std::uint16_t>(2 * distinct - 2 + (key & 1));
  }
  alignas(64) double pairs[2 * kHalvesBlock];
  HWY_DYNAMIC_DISPATCH(NormalPairs)(stream, counters, nullptr, distinct, pairs, true);
  for (std::size_t i = 0; i < n; ++i) z[i] = pairs[half[i]];
}

// Whether partners sit side by side often enough in n items that sharing pairs pays: sharing
// saves a pair for each item whose counter repeats the one before (~3.3 ns here) and costs
// finding them, a gather and a second pass over every item (~2.7 ns); below about two in five,
// one pair an item is quicker. Either way the values are the same.
bool partners_pay(const std::uint64_t* keys, std::size_t n) {
  std::size_t repeats = 0;
  for (std::size_t i = 1; i < n; ++i) repeats += ((keys[i] ^ keys[i - 1]) | 1) == 1;
  return 5 * repeats >= 2 * n;
}

}  // namespace

void normal_halves(std::uint64_t stream, const std::uint64_t* keys, std::size_t count,
                   double* out) noexcept {
  for (std::size_t first = 0; first < count; first += kHalvesBlock)
    shared_halves(stream, keys + first, std::min(count - first, kHalvesBlock), out + first);
}

// A block at a time: through shared pairs where partners sit side by side often enough, else
// one pair an item.
void privatize_normal_halves(std::uint64_t stream, const std::uint64_t* keys, std::size_t count,
                             const double* phi, double sigma_grid, double scale, double grid,
                             double* out) noexcept {
  for (std::size_t first = 0; first < count; first += kHalvesBlock) {
    const std::size_t n = std::min(count - first, kHalvesBlock);
    if (partners_pay(keys + first, n)) {
      alignas(64) double z[kHalvesBlock];
      shared_halves(stream, keys + first, n, z);
      HWY_DYNAMIC_DISPATCH(ReleaseWithNormals)
      (z, phi + first, n, sigma_grid, scale, grid, out + first);
    } else {
      HWY_DYNAMIC_DISPATCH(PrivatizeHalvesDirect)
      (stream, keys + first, n, phi + first, sigma_grid, scale, grid, nullptr, nullptr, nullptr,
       out + first);
    }
  }
}

// Items with plans of their own are users asked distinct ρ (Alg. 3), a few of a query's at a
// time: partners rarely sit side by side, so each takes its own pair without looking.
void privatize_normal_halves_each(std::uint64_t stream, const std::uint64_t* keys,
                                  std::size_t count, const double* phi, const double* sigma_grid,
                                  const double* scale, const double* grid, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(PrivatizeHalvesDirect)
  (stream, keys, count, phi, 0, 0, 0, sigma_grid, scale, grid, out);
}

const char* normal_pairs_target() noexcept {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

namespace {

// AES's S-box, computed: the inverse in GF(2^8) (x^254; 0 for 0), then the affine map.
constexpr std::uint8_t gf_times2(std::uint8_t x) {
  return static_cast<std::uint8_t>((x << 1) ^ ((x & 0x80) ? 0x1b : 0));
}
constexpr std::uint8_t gf_multiply(std::uint8_t a, std::uint8_t b) {
  std::uint8_t product = 0;
  for (; b != 0; b >>= 1, a = gf_times2(a))
    if (b & 1) product ^= a;
  return product;
}
constexpr std::array<std::uint8_t, 256> make_sbox() {
  std::array<std::uint8_t, 256> box{};
  for (unsigned x = 0; x < 256; ++x) {
    std::uint8_t inverse = 1, power = static_cast<std::uint8_t>(x);
    for (unsigned e = 254; e != 0; e >>= 1, power = gf_multiply(power, power))
      if (e & 1) inverse = gf_multiply(inverse, power);
    if (x == 0) inverse = 0;
    const auto rotl = [](std::uint8_t v, int n) {
      return static_cast<std::uint8_t>((v << n) | (v >> (8 - n)));
    };
    box[x] = static_cast<std::uint8_t>(inverse ^ rotl(inverse, 1) ^ rotl(inverse, 2) ^
                                       rotl(inverse, 3) ^ rotl(inverse, 4) ^ 0x63);
  }
  return box;
}
constexpr std::array<std::uint8_t, 256> kSbox = make_sbox();
static_assert(kSbox[0] == 0x63 && kSbox[1] == 0x7c && kSbox[0x53] == 0xed, "FIPS-197's S-box");

using Block = std::array<std::uint8_t, 16>;  // byte i: bits 8i .. 8i + 7 of the 128-bit value

Block to_block(std::uint64_t low, std::uint64_t high) {
  Block b{};
  for (int i = 0; i < 8; ++i) {
    b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(low >> (8 * i));
    b[static_cast<std::size_t>(i + 8)] = static_cast<std::uint8_t>(high >> (8 * i));
  }
  return b;
}

// One AES encryption round as x86's AESENC (last: AESENCLAST, without MixColumns): SubBytes,
// ShiftRows, MixColumns, then the round key added. The state is column-major: byte 4c + r is
// row r of column c.
Block aes_round(const Block& state, const Block& round_key, bool last) {
  Block shifted{};
  for (std::size_t c = 0; c < 4; ++c)
    for (std::size_t r = 0; r < 4; ++r) shifted[4 * c + r] = kSbox[state[4 * ((c + r) % 4) + r]];
  Block out = shifted;
  if (!last) {
    for (std::size_t c = 0; c < 4; ++c) {
      const std::uint8_t* a = &shifted[4 * c];
      const auto times3 = [](std::uint8_t v) {
        return static_cast<std::uint8_t>(gf_times2(v) ^ v);
      };
      out[4 * c + 0] = static_cast<std::uint8_t>(gf_times2(a[0]) ^ times3(a[1]) ^ a[2] ^ a[3]);
      out[4 * c + 1] = static_cast<std::uint8_t>(a[0] ^ gf_times2(a[1]) ^ times3(a[2]) ^ a[3]);
      out[4 * c + 2] = static_cast<std::uint8_t>(a[0] ^ a[1] ^ gf_times2(a[2]) ^ times3(a[3]));
      out[4 * c + 3] = static_cast<std::uint8_t>(times3(a[0]) ^ a[1] ^ a[2] ^ gf_times2(a[3]));
    }
  }
  for (std::size_t i = 0; i < 16; ++i) out[i] ^= round_key[i];
  return out;
}

}  // namespace

std::array<std::array<std::uint64_t, 2>, kArsRounds + 1> ars_round_keys(
    std::uint64_t stream) noexcept {
  // Random123's Weyl increments: the golden ratio and √3 − 1, in 64-bit fixed point.
  constexpr std::uint64_t kWeylLow = 0x9E3779B97F4A7C15ULL, kWeylHigh = 0xBB67AE8584CAA73BULL;
  std::array<std::array<std::uint64_t, 2>, kArsRounds + 1> keys{};
  std::uint64_t low = stream, high = 0;
  for (std::size_t r = 0; r <= kArsRounds; ++r, low += kWeylLow, high += kWeylHigh)
    keys[r] = {low, high};
  return keys;
}

std::array<std::uint64_t, 2> ars_words(std::uint64_t user_key, std::uint64_t stream,
                                       std::uint32_t block) noexcept {
  const auto keys = ars_round_keys(stream);
  Block state = to_block(user_key, block);
  const Block first = to_block(keys[0][0], keys[0][1]);
  for (std::size_t i = 0; i < 16; ++i) state[i] ^= first[i];
  for (std::size_t r = 1; r <= kArsRounds; ++r)
    state = aes_round(state, to_block(keys[r][0], keys[r][1]), r == kArsRounds);
  std::array<std::uint64_t, 2> words{};
  for (int i = 7; i >= 0; --i) {
    words[0] = words[0] << 8 | state[static_cast<std::size_t>(i)];
    words[1] = words[1] << 8 | state[static_cast<std::size_t>(i + 8)];
  }
  return words;
}

}  // namespace cgp::simulation
#endif  // HWY_ONCE

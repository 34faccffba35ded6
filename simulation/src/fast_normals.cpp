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

HWY_ATTR void NormalPairs(std::uint64_t stream, const std::uint64_t* HWY_RESTRICT keys,
                          const std::uint32_t* HWY_RESTRICT blocks, std::size_t count,
                          double* HWY_RESTRICT out, bool pairs) {
  const hn::ScalableTag<std::uint64_t> du;
  const hn::ScalableTag<double> dd;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<std::uint32_t, decltype(du)> d32;  // one u32 per u64 lane, for blocks
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(du);
  const auto low32 = hn::Set(du, 0xffffffffULL);
  const auto m0 = hn::Set(du, 0xD2511F53ULL), m1 = hn::Set(du, 0xCD9E8D57ULL);
  const auto w0 = hn::Set(du, 0x9E3779B9ULL), w1 = hn::Set(du, 0xBB67AE85ULL);
  const auto stream_lo = hn::Set(du, stream & 0xffffffffULL), stream_hi = hn::Set(du, stream >> 32);
  const auto two_pi = hn::Set(dd, 6.283185307179586476925286766559);
  const auto pi = hn::Set(dd, 3.141592653589793238462643383280);
  const auto ulp53 = hn::Set(dd, 0x1p-53);
  const auto one = hn::Set(dd, 1.0), minus_two = hn::Set(dd, -2.0);

  HWY_ALIGN std::uint64_t key_buffer[kMaxLanes] = {};
  HWY_ALIGN std::uint64_t block_buffer[kMaxLanes] = {};
  HWY_ALIGN double first[kMaxLanes], second[kMaxLanes];
  for (std::size_t i = 0; i < count; i += lanes) {
    // Each lane is computed from its own inputs only: a short last batch is padded, never
    // computed differently.
    const std::size_t here = count - i < lanes ? count - i : lanes;
    auto key = hn::Zero(du), block = hn::Zero(du);
    if (here == lanes) {
      key = hn::LoadU(du, keys + i);
      if (blocks) block = hn::PromoteTo(du, hn::LoadU(d32, blocks + i));
    } else {
      for (std::size_t l = 0; l < lanes; ++l) {
        key_buffer[l] = l < here ? keys[i + l] : 0;
        block_buffer[l] = l < here && blocks ? blocks[i + l] : 0;
      }
      key = hn::Load(du, key_buffer);
      block = hn::Load(du, block_buffer);
    }
    // Only the low 32 bits of each lane are Philox's word; the high bits may carry garbage
    // (key carries, the high half of a product), which MulEven ignores and the end masks off.
    auto k0 = key, k1 = hn::ShiftRight<32>(key);
    auto c0 = stream_lo, c1 = stream_hi, c2 = block, c3 = hn::Zero(du);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 = hn::Add(k0, w0);
        k1 = hn::Add(k1, w1);
      }
      const auto p0 = product(du, m0, c0), p1 = product(du, m1, c2);
      c0 = hn::Xor3(hn::ShiftRight<32>(p1), c1, k0);
      c1 = p1;  // its low word
      c2 = hn::Xor3(hn::ShiftRight<32>(p0), c3, k1);
      c3 = p0;
    }
    c1 = hn::And(c1, low32);
    c3 = hn::And(c3, low32);
    // 53 bits each: exact in a double, so the conversion is the same on every target.
    const auto bits1 = hn::ShiftRight<11>(hn::Or(hn::ShiftLeft<32>(c0), c1));
    const auto bits2 = hn::ShiftRight<11>(hn::Or(hn::ShiftLeft<32>(c2), c3));
    const auto u1 = hn::Mul(hn::Add(hn::ConvertTo(dd, hn::BitCast(di, bits1)), one), ulp53);
    const auto u2 = hn::Mul(hn::ConvertTo(dd, hn::BitCast(di, bits2)), ulp53);
    const auto radius = hn::Sqrt(hn::Mul(minus_two, hn::Log(dd, u1)));
    const auto angle = hn::Sub(hn::Mul(two_pi, u2), pi);
    const auto z0 = hn::Mul(radius, hn::Cos(dd, angle));
    if (pairs) {
      const auto z1 = hn::Mul(radius, hn::Sin(dd, angle));
      if (here == lanes) {
        hn::StoreInterleaved2(z0, z1, dd, out + 2 * i);
      } else {
        hn::Store(z0, dd, first);
        hn::Store(z1, dd, second);
        for (std::size_t l = 0; l < here; ++l) {
          out[2 * (i + l)] = first[l];
          out[2 * (i + l) + 1] = second[l];
        }
      }
    } else if (here == lanes) {
      hn::StoreU(z0, dd, out + i);
    } else {
      hn::Store(z0, dd, first);
      for (std::size_t l = 0; l < here; ++l) out[i + l] = first[l];
    }
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
HWY_EXPORT(TargetName);

void normal_pairs(std::uint64_t stream, const std::uint64_t* keys, const std::uint32_t* blocks,
                  std::size_t count, double* out, bool pairs) noexcept {
  HWY_DYNAMIC_DISPATCH(NormalPairs)(stream, keys, blocks, count, out, pairs);
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

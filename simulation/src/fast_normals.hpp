// Standard normals for the simulation's fast noise: ARS-7 (Salmon et al., SC'11: AES rounds
// under a Weyl key schedule), a counter-based generator keyed by the round's stream and counted
// by (user key, block), turned into pairs of normals by Box–Muller — both vectorized with
// Highway (libhwy) and dispatched at run time to the widest instruction set the CPU has
// (AVX-512, AVX2, SSE4, SSSE3, or portable scalar code). The AES rounds are AES-NI on AVX-512,
// AVX2 and SSE4, Highway's portable AES on SSSE3 (and EMU128), and ars_words' own on the scalar
// target.
//
// There is no generator state: an item's normals depend on its (key, stream, block) only, never
// on the batch it is computed in, the lane it lands in or the thread — so results are the same
// for any thread count and batch size. Across instruction sets the transcendental functions may
// differ in the last bit (Highway's log is within 3 ulp; sine and cosine are fdlibm's kernels,
// with or without fused multiply-adds), which moves a released value by one grid unit
// (u ≤ 2^-24·σ) with probability about 2^-20 per sample.
//
// Cost (cgp_bench_coordinator floor, AVX2 with AES-NI): Philox4x32-10 with Highway's cos and sin
// took ~11 ns a single normal and ~6.7 ns a value in pairs; ARS-7 with the angle reduced exactly
// (a fixed-point fraction of a turn: its octant is its top bits) takes ~6.2 ns and ~3.3 ns. So a
// simulated 1-D release does not take a pair's cosine alone: partners share the pair
// (normal_halves).
// Random123 documents both generators as Crush-resistant; ARS-7 is its default ARS, with "a
// considerable safety margin" of rounds.
//
// Not for devices: a simulated release needs the right law, not secrecy (the device's own noise
// is client-sdk's exact sampler).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace cgp::simulation {

// ARS-7, the rounds of the fast noise's generator: Random123's default ARS (AES rounds with a
// Weyl key schedule, "a considerable safety margin over the minimum number of rounds with no
// known statistical flaws", ars.h).
inline constexpr std::size_t kArsRounds = 7;

// ARS-7's round keys for a stream: k_r = (stream, 0) + r·(0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B),
// r = 0 .. 7, each as (low, high) 64-bit halves.
std::array<std::array<std::uint64_t, 2>, kArsRounds + 1> ars_round_keys(
    std::uint64_t stream) noexcept;

// ARS-7 (Random123's ars4x32_R(7, ·, ·)) of the counter (user_key, block) — low 64 bits the
// user's key, high 64 bits the block — under the key (stream, 0): the output's low and high 64
// bits. Portable code: the scalar reference the vector code is tested against (and against
// Random123's own, with AES-NI).
std::array<std::uint64_t, 2> ars_words(std::uint64_t user_key, std::uint64_t stream,
                                       std::uint32_t block) noexcept;

// For each item i < count, the pair (r·cos θ, r·sin θ) of independent N(0, 1) from the ARS-7
// output (low, high) = ars_words(keys[i], stream, blocks[i]) (blocks == nullptr: block 0):
// u₁ = 1 − (low >> 12)·2^-52 ∈ (0, 1], u₂ = (high >> 12)·2^-52 ∈ [0, 1), r = √(−2 ln u₁),
// θ = 2π·u₂.
//   pairs = true:  out[2i] = r·cos θ, out[2i + 1] = r·sin θ;
//   pairs = false: out[i] = r·cos θ (one normal per item).
void normal_pairs(std::uint64_t stream, const std::uint64_t* keys, const std::uint32_t* blocks,
                  std::size_t count, double* out, bool pairs) noexcept;

// client::privatize_with_normals(φ, plan, z) for the z that normal_pairs(stream, keys, blocks,
// count, ·, pairs) gives, without the normals in between: the same values, bit for bit. φ and
// out hold count values (pairs = false) or count pairs (pairs = true), as normal_pairs' output;
// sigma_grid = √(plan.sigma2_grid), scale = plan.grid_scale(), grid = plan.grid(). The grid
// arithmetic is done in doubles, exactly: every intermediate is an integer below 2^57 (or
// v's own value), and the one rounded step — the sum — rounds as the integer sum's conversion.
void privatize_normals(std::uint64_t stream, const std::uint64_t* keys, const std::uint32_t* blocks,
                       std::size_t count, bool pairs, const double* phi, double sigma_grid,
                       double scale, double grid, double* out) noexcept;

// privatize_normals with each item's own plan: item i's values under (sigma_grid[i], scale[i],
// grid[i]) — the same values, bit for bit, as privatize_normals over that item alone. For
// batches where users are asked distinct ρ (Alg. 3), whose runs of one plan are too short to
// fill vectors.
void privatize_normals_each(std::uint64_t stream, const std::uint64_t* keys,
                            const std::uint32_t* blocks, std::size_t count, bool pairs,
                            const double* phi, const double* sigma_grid, const double* scale,
                            const double* grid, double* out) noexcept;

// One normal per item from pairs that partners share. Item i's counter is (keys[i] with its
// last bit cleared, block 0), and its normal is that counter's r·cos θ when keys[i] is even and
// r·sin θ when odd (normal_pairs' pair): two items whose keys differ only in the last bit take
// the two halves of one pair, independent standard normals, and where they sit side by side in
// the batch the pair is computed once for both. An item's value depends on its key and the
// stream only, never on whether its partner is in the batch.
void normal_halves(std::uint64_t stream, const std::uint64_t* keys, std::size_t count,
                   double* out) noexcept;

// privatize_normals for one value per item with normal_halves' normals: out[i] =
// privatize_with_normals(φ[i], plan, z[i]) for z = normal_halves(stream, keys, count), bit for
// bit.
void privatize_normal_halves(std::uint64_t stream, const std::uint64_t* keys, std::size_t count,
                             const double* phi, double sigma_grid, double scale, double grid,
                             double* out) noexcept;

// privatize_normal_halves with each item's own plan (as privatize_normals_each).
void privatize_normal_halves_each(std::uint64_t stream, const std::uint64_t* keys,
                                  std::size_t count, const double* phi, const double* sigma_grid,
                                  const double* scale, const double* grid, double* out) noexcept;

// The target normal_pairs runs on here ("AVX3", "AVX2", "SSE4", "EMU128", ...).
const char* normal_pairs_target() noexcept;

}  // namespace cgp::simulation

// Standard normals for the simulation's fast noise: Philox4x32-10 (Salmon et al., SC'11), a
// counter-based generator, keyed by (run seed, user) and counted by (round stream, block),
// turned into pairs of normals by Box–Muller — both vectorized with Highway (libhwy) and
// dispatched at run time to the widest instruction set the CPU has (AVX-512, AVX2, SSE4, or
// portable code).
//
// There is no generator state: an item's normals depend on its (key, stream, block) only, never
// on the batch it is computed in, the lane it lands in or the thread — so results are the same
// for any thread count and batch size. Across instruction sets the transcendental functions may
// differ in the last bit (Highway's log/sin/cos are within 3 ulp), which moves a released value
// by one grid unit (u ≤ 2^-24·σ) with probability about 2^-20 per sample.
//
// Not for devices: a simulated release needs the right law, not secrecy (the device's own noise
// is client-sdk's exact sampler).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace cgp::simulation {

// Philox4x32-10 of counter {stream low, stream high, block, 0} under key {key low, key high}.
// The scalar reference the vector code is tested against (and against Random123's own).
std::array<std::uint32_t, 4> philox_words(std::uint64_t key, std::uint64_t stream,
                                          std::uint32_t block) noexcept;

// For each item i < count, the pair (r·cos θ, r·sin θ) of independent N(0, 1) from the Philox
// words of (keys[i], stream, blocks[i]) (blocks == nullptr: block 0): u₁ ∈ (0, 1] from the first
// 53 bits, u₂ ∈ [0, 1) from the next 53, r = √(−2 ln u₁), θ = 2π·u₂ − π.
//   pairs = true:  out[2i] = r·cos θ, out[2i + 1] = r·sin θ;
//   pairs = false: out[i] = r·cos θ (one normal per item; the sine is not computed).
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

// The target normal_pairs runs on here ("AVX3", "AVX2", "SSE4", "EMU128", ...).
const char* normal_pairs_target() noexcept;

}  // namespace cgp::simulation

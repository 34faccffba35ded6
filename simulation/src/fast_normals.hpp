// Standard normals for the simulation's fast noise: Random123's Philox2x64-10, a counter-based
// generator, keyed by (run seed, user) and counted by (round stream, block), turned into normals
// by Random123's Box–Muller. There is no generator state: a user's numbers in a round are the
// same for any thread count, batch or order of work. Not for devices — a simulated release
// needs the right law, not secrecy (the device's own noise is client-sdk's exact sampler).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cgp::simulation {

// z[0 .. count): independent N(0, 1) for (key, stream).
void fast_normals(std::uint64_t key, std::uint64_t stream, double* z, std::size_t count) noexcept;

}  // namespace cgp::simulation

// What a device charges for a release asked at ρ. Public, so that a coordinator's budget mirror
// (Alg. 2) predicts every charge exactly; computed on the device next to the noise it pays for
// (client-sdk privatizer, proof in client-sdk/src/privatizer.md).
#pragma once

namespace cgp::privacy {

// The device rounds the statistic to a grid of spacing u ≈ σ·2^-24 and adds exact discrete
// Gaussian noise; rounding adds at most a few u to the sensitivity, paid for by charging
// ρ·(1 + kGridSlack)² for inputs at distance ≥ kGridSlack⁻¹ times that slack.
inline constexpr double kGridSlack = 1.0 / 1024;

// ρ·(1 + 2^-10)², rounded up. Precondition: ρ finite and > 0. Out of line on purpose: one
// compiled copy gives the device and every coordinator the same bits on every target (inlined,
// a compiler may fuse its multiply-adds differently at each call site where the CPU has FMA:
// on arm64 the engine's prediction and the test's reference then differed in the last bit).
double device_charge(double rho) noexcept;

// The largest ρ a coordinator may ask for when a device may be charged at most `charge`:
// device_charge(result) ≤ charge. Precondition: charge finite and > 0.
double rho_within_charge(double charge) noexcept;

// The smallest ρ a device with budget `capacity` answers: capacity·2^-kMinRhoBits (below it the
// device's grid would need more than 62 bits; client-sdk privatizer.md). Public, so that a
// coordinator plans rounds its devices will answer. capacity finite and > 0.
inline constexpr int kMinRhoBits = 18;
double min_rho(double capacity) noexcept;

}  // namespace cgp::privacy

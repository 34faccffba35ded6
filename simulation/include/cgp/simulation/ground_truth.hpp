// Exact answers on the raw data and the error metrics of paper §7, for evaluation only: the
// coordinator never sees raw data in a real deployment.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::simulation {

using coordinator::UserId;

// |{i : x_i ∈ Γ}| (Proj_Γ(x_i) < 0), over `users` (all when empty).
std::size_t exact_count(std::span<const double> points, std::size_t dimension,
                        const geometry::Region& range, std::span<const UserId> users = {});
// (1/n) Σ exp(−‖x_i − p‖²/(2b²)) over `users` (all when empty).
double exact_kde(std::span<const double> points, std::size_t dimension, std::span<const double> p,
                 double bandwidth, std::span<const UserId> users = {});

// Exact k nearest neighbours, ties by id: one scan with a bounded heap per query, or, for
// dimension ≤ 8 once a hundred queries have come (a build costs about as much as that), a
// k-d tree (nanoflann) over all points. Holds a view of `points`; callable from many threads.
class KnnOracle {
 public:
  KnnOracle(std::span<const double> points, std::size_t dimension);
  KnnOracle(KnnOracle&&) noexcept;
  ~KnnOracle();
  // The k nearest users to p, nearest first; among `candidates` when given.
  std::vector<UserId> nearest(std::span<const double> p, std::size_t k,
                              std::span<const UserId> candidates = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Σ_{i ∈ ids} ‖x_i − p‖.
double sum_of_distances(std::span<const double> points, std::size_t dimension,
                        std::span<const double> p, std::span<const UserId> ids);

// CountErr = |C̃ − C|/C (§7); with C = 0 the absolute error |C̃|.
double count_error(double estimate, double truth) noexcept;
// ℓ1-Err = |Ã − A|.
double l1_error(double estimate, double truth) noexcept;
// DistErr = (Dist(J̃, p) − Dist(J*, p))/Dist(J*, p); 0 when both are 0.
double distance_error(double found_distance, double true_distance) noexcept;
// PrivSav = (1/n) Σ B̂_i/ρ with B̂_i = ρ − charged_i: the share of the query's budget ρ that
// users kept, over `users` (all when empty).
double privacy_saving(std::span<const coordinator::Charge> charged, double rho,
                      std::span<const UserId> users = {}) noexcept;

}  // namespace cgp::simulation

#include "cgp/simulation/ground_truth.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <nanoflann.hpp>
#include <numeric>

#include "cgp/common/geometry/signed_distance.hpp"

namespace cgp::simulation {

using namespace coordinator;
namespace {

template <class Visit>
void for_users(std::size_t n, std::span<const UserId> users, Visit&& visit) {
  if (users.empty()) {
    for (std::size_t i = 0; i < n; ++i) visit(static_cast<UserId>(i));
  } else {
    for (UserId u : users) visit(u);
  }
}

// nanoflann's dataset interface over a flat row-major array.
struct FlatPoints {
  std::span<const double> data;
  std::size_t dimension;
  std::size_t kdtree_get_point_count() const { return data.size() / dimension; }
  double kdtree_get_pt(std::size_t i, std::size_t d) const { return data[i * dimension + d]; }
  template <class Box>
  bool kdtree_get_bbox(Box&) const {
    return false;
  }
};

using KdTree = nanoflann::KDTreeSingleIndexAdaptor<nanoflann::L2_Simple_Adaptor<double, FlatPoints>,
                                                   FlatPoints, -1, std::uint32_t>;

constexpr std::size_t kKdTreeMaxDimension = 8;

}  // namespace

std::size_t exact_count(std::span<const double> points, std::size_t dimension,
                        const geometry::Region& range, std::span<const UserId> users) {
  std::size_t count = 0;
  if (users.empty()) {  // everyone: signed distances a block at a time, one dispatch per block
    constexpr std::size_t kBlock = 512;
    double distance[kBlock];
    const std::size_t n = points.size() / dimension;
    for (std::size_t first = 0; first < n; first += kBlock) {
      const std::size_t here = std::min(kBlock, n - first);
      geometry::signed_distances(range, points.data() + first * dimension, here, distance);
      for (std::size_t i = 0; i < here; ++i) count += distance[i] < 0;  // geometry::inside
    }
    return count;
  }
  for_users(points.size() / dimension, users, [&](UserId u) {
    count +=
        geometry::inside(range, points.subspan(static_cast<std::size_t>(u) * dimension, dimension));
  });
  return count;
}

double exact_kde(std::span<const double> points, std::size_t dimension, std::span<const double> p,
                 double bandwidth, std::span<const UserId> users) {
  double sum = 0;
  std::size_t n = 0;
  for_users(points.size() / dimension, users, [&](UserId u) {
    const double d = geometry::euclidean_distance(
        points.subspan(static_cast<std::size_t>(u) * dimension, dimension), p);
    sum += std::exp(-d * d / (2 * bandwidth * bandwidth));
    ++n;
  });
  return n ? sum / static_cast<double>(n) : 0.0;
}

struct KnnOracle::Impl {
  FlatPoints points;
  std::unique_ptr<KdTree> tree;  // only for low dimension
};

KnnOracle::KnnOracle(std::span<const double> points, std::size_t dimension)
    : impl_(std::make_unique<Impl>(Impl{FlatPoints{points, dimension}, nullptr})) {
  if (dimension <= kKdTreeMaxDimension) {
    impl_->tree = std::make_unique<KdTree>(static_cast<int>(dimension), impl_->points,
                                           nanoflann::KDTreeSingleIndexAdaptorParams(16));
  }
}
KnnOracle::KnnOracle(KnnOracle&&) noexcept = default;
KnnOracle::~KnnOracle() = default;

std::vector<UserId> KnnOracle::nearest(std::span<const double> p, std::size_t k,
                                       std::span<const UserId> candidates) const {
  const FlatPoints& pts = impl_->points;
  const std::size_t n = pts.kdtree_get_point_count();
  if (candidates.empty() && impl_->tree) {
    k = std::min(k, n);
    std::vector<std::uint32_t> ids(k);
    std::vector<double> d2(k);
    const std::size_t found = impl_->tree->knnSearch(p.data(), k, ids.data(), d2.data());
    ids.resize(found);
    return {ids.begin(), ids.end()};
  }
  // Everyone but a few (a kNN experiment leaves out its query user): the tree's k + few
  // nearest, those that are candidates. Candidates strictly ascending and in range, so exactly
  // n − |candidates| users are left out.
  const std::size_t left_out = n - std::min(n, candidates.size());
  if (impl_->tree && !candidates.empty() && left_out <= 64 && candidates.back() < n &&
      std::adjacent_find(candidates.begin(), candidates.end(), std::greater_equal<>()) ==
          candidates.end()) {
    const std::size_t want = std::min(n, k + left_out);
    std::vector<std::uint32_t> ids(want);
    std::vector<double> d2(want);
    const std::size_t found = impl_->tree->knnSearch(p.data(), want, ids.data(), d2.data());
    std::vector<UserId> out;
    for (std::size_t a = 0; a < found && out.size() < k; ++a)
      if (std::binary_search(candidates.begin(), candidates.end(), ids[a])) out.push_back(ids[a]);
    return out;
  }
  // Brute force: squared distances of every candidate row with Eigen, then a partial sort.
  using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMatrix> all(pts.data.data(), static_cast<Eigen::Index>(n),
                                  static_cast<Eigen::Index>(pts.dimension));
  Eigen::Map<const Eigen::RowVectorXd> q(p.data(), static_cast<Eigen::Index>(pts.dimension));
  std::vector<std::pair<double, UserId>> ranked;
  if (candidates.empty()) {
    Eigen::VectorXd d2 = (all.rowwise() - q).rowwise().squaredNorm();
    ranked.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      ranked.emplace_back(d2[static_cast<Eigen::Index>(i)], static_cast<UserId>(i));
  } else {
    ranked.reserve(candidates.size());
    for (UserId u : candidates)
      ranked.emplace_back((all.row(static_cast<Eigen::Index>(u)) - q).squaredNorm(), u);
  }
  k = std::min(k, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k), ranked.end());
  std::vector<UserId> out(k);
  for (std::size_t a = 0; a < k; ++a) out[a] = ranked[a].second;
  return out;
}

double sum_of_distances(std::span<const double> points, std::size_t dimension,
                        std::span<const double> p, std::span<const UserId> ids) {
  double sum = 0;
  for (UserId u : ids)
    sum += geometry::euclidean_distance(
        points.subspan(static_cast<std::size_t>(u) * dimension, dimension), p);
  return sum;
}

double count_error(double estimate, double truth) noexcept {
  const double error = std::fabs(estimate - truth);
  return truth != 0 ? error / std::fabs(truth) : error;
}

double l1_error(double estimate, double truth) noexcept {
  return std::fabs(estimate - truth);
}

double distance_error(double found_distance, double true_distance) noexcept {
  if (true_distance == 0) return found_distance == 0 ? 0.0 : found_distance;
  return (found_distance - true_distance) / true_distance;
}

double privacy_saving(std::span<const coordinator::Charge> charged, double rho,
                      std::span<const UserId> users) noexcept {
  double kept = 0;
  std::size_t n = 0;
  for_users(charged.size(), users, [&](UserId u) {
    kept += std::max(0.0, rho - charged[u].value()) / rho;
    ++n;
  });
  return n ? kept / static_cast<double>(n) : 0.0;
}

}  // namespace cgp::simulation

#include "cgp/simulation/ground_truth.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
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
  if (users.empty())  // everyone: one dispatch on the region's kind
    return geometry::count_inside(range, points.data(), points.size() / dimension);
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

namespace {

// The k smallest (squared distance, id) of a scan, kept as a max-heap: a point goes in only
// when it beats the worst kept, which after the first few thousand points is rare.
class NearestK {
 public:
  explicit NearestK(std::size_t k) : k_(k) { heap_.reserve(k); }
  double worst() const noexcept {
    return heap_.size() < k_ ? std::numeric_limits<double>::infinity() : heap_.front().first;
  }
  void offer(double d2, UserId u) {
    const std::pair<double, UserId> item{d2, u};
    if (heap_.size() < k_) {
      heap_.push_back(item);
      std::push_heap(heap_.begin(), heap_.end());
    } else if (item < heap_.front()) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.back() = item;
      std::push_heap(heap_.begin(), heap_.end());
    }
  }
  std::vector<UserId> sorted() {
    std::sort_heap(heap_.begin(), heap_.end());
    std::vector<UserId> out(heap_.size());
    for (std::size_t a = 0; a < heap_.size(); ++a) out[a] = heap_[a].second;
    return out;
  }

 private:
  std::size_t k_;
  std::vector<std::pair<double, UserId>> heap_;
};

// Whether ids[0..n) are ids[0], ids[0] + 1, ...
bool consecutive(const UserId* ids, std::size_t n) {
  for (std::size_t i = 1; i < n; ++i)
    if (ids[i] != ids[0] + i) return false;
  return true;
}

// The k nearest to p among users 0..n−1 (ids == nullptr) or ids[0..n), by (squared distance,
// id): one pass, the squared distances a block at a time (2-D by hand; else Eigen over a block
// of rows, gathered first when the users of a block are not consecutive), then the few that beat
// the worst kept.
std::vector<UserId> scan_nearest(const double* points, std::size_t dimension, const double* p,
                                 std::size_t k, const UserId* ids, std::size_t n) {
  using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  NearestK best(k);
  constexpr std::size_t kBlock = 256;
  double d2[kBlock];
  std::vector<double> rows(dimension == 2 || !ids ? 0 : kBlock * dimension);
  const Eigen::Map<const Eigen::RowVectorXd> q(p, static_cast<Eigen::Index>(dimension));
  for (std::size_t first = 0; first < n; first += kBlock) {
    const std::size_t here = std::min(kBlock, n - first);
    if (dimension == 2) {
      for (std::size_t i = 0; i < here; ++i) {
        const std::size_t u = ids ? ids[first + i] : first + i;
        const double dx = points[2 * u] - p[0], dy = points[2 * u + 1] - p[1];
        d2[i] = dx * dx + dy * dy;
      }
    } else {
      const double* block = points + first * dimension;
      // A block of consecutive users is read in place (a kNN experiment's candidates are
      // everyone but the query user, so nearly every block is one; copying them cost as much
      // as the distances).
      if (ids && consecutive(ids + first, here)) {
        block = points + std::size_t{ids[first]} * dimension;
      } else if (ids) {
        for (std::size_t i = 0; i < here; ++i)
          std::copy_n(points + std::size_t{ids[first + i]} * dimension, dimension,
                      rows.data() + i * dimension);
        block = rows.data();
      }
      const Eigen::Map<const RowMatrix> x(block, static_cast<Eigen::Index>(here),
                                          static_cast<Eigen::Index>(dimension));
      Eigen::Map<Eigen::VectorXd>(d2, static_cast<Eigen::Index>(here)) =
          (x.rowwise() - q).rowwise().squaredNorm();
    }
    const double worst = best.worst();
    for (std::size_t i = 0; i < here; ++i)
      if (d2[i] <= worst) best.offer(d2[i], ids ? ids[first + i] : static_cast<UserId>(first + i));
  }
  return best.sorted();
}

// A tree pays for itself after this many queries: measured on 200,000 2-D points, its build
// takes ~40 ms and a scan ~0.4 ms (so a run never spends more than twice the better of the two).
constexpr std::size_t kScansBeforeTree = 100;

}  // namespace

struct KnnOracle::Impl {
  FlatPoints points;
  // Only for low dimension, built once enough queries have come (a few queries scan instead).
  std::mutex tree_mutex;
  std::size_t queries = 0;
  std::unique_ptr<KdTree> tree;
  const KdTree* tree_for_query() {
    if (points.dimension > kKdTreeMaxDimension) return nullptr;
    const std::lock_guard lock(tree_mutex);
    if (!tree && ++queries > kScansBeforeTree)
      tree = std::make_unique<KdTree>(static_cast<int>(points.dimension), points,
                                      nanoflann::KDTreeSingleIndexAdaptorParams(16));
    return tree.get();
  }
};

KnnOracle::KnnOracle(std::span<const double> points, std::size_t dimension)
    : impl_(std::make_unique<Impl>()) {
  impl_->points = FlatPoints{points, dimension};
}
KnnOracle::KnnOracle(KnnOracle&&) noexcept = default;
KnnOracle::~KnnOracle() = default;

std::vector<UserId> KnnOracle::nearest(std::span<const double> p, std::size_t k,
                                       std::span<const UserId> candidates) const {
  const FlatPoints& pts = impl_->points;
  const std::size_t n = pts.kdtree_get_point_count();
  if (k == 0 || n == 0) return {};  // (nanoflann's search does not take k = 0)
  // Everyone, or everyone but a few (a kNN experiment leaves out its query user): candidates
  // strictly ascending and in range, so exactly n − |candidates| users are left out.
  const std::size_t left_out = n - std::min(n, candidates.size());
  const bool all_but_few =
      candidates.empty() || (left_out <= 64 && candidates.back() < n &&
                             std::adjacent_find(candidates.begin(), candidates.end(),
                                                std::greater_equal<>()) == candidates.end());
  const KdTree* tree = all_but_few ? impl_->tree_for_query() : nullptr;
  if (tree && candidates.empty()) {
    k = std::min(k, n);
    std::vector<std::uint32_t> ids(k);
    std::vector<double> d2(k);
    const std::size_t found = tree->knnSearch(p.data(), k, ids.data(), d2.data());
    ids.resize(found);
    return {ids.begin(), ids.end()};
  }
  // The tree's k + few nearest, those that are candidates.
  if (tree) {
    const std::size_t want = std::min(n, k + left_out);
    std::vector<std::uint32_t> ids(want);
    std::vector<double> d2(want);
    const std::size_t found = tree->knnSearch(p.data(), want, ids.data(), d2.data());
    std::vector<UserId> out;
    for (std::size_t a = 0; a < found && out.size() < k; ++a)
      if (std::binary_search(candidates.begin(), candidates.end(), ids[a])) out.push_back(ids[a]);
    return out;
  }
  if (candidates.empty())
    return scan_nearest(pts.data.data(), pts.dimension, p.data(), k, nullptr, n);
  return scan_nearest(pts.data.data(), pts.dimension, p.data(), k, candidates.data(),
                      candidates.size());
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

// Data for cgp-sim: CSV (lon,lat | x,y | any numeric columns), IDX images (gzip or not), and the
// built-in defaults. Every failure is a one-line error naming the file, column or row.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/projection.hpp"

namespace cgp::experiments {

struct Dataset {
  std::vector<double> points;  // n × dimension, row-major
  std::size_t dimension = 0;
  std::string description;  // for the table header ("NYC.csv: 53211 lon/lat points, local")
  std::array<double, 2> origin{0, 0};  // lon/lat the projection is centred on (lon/lat data)
  // A slice of a bigger data set (one rank's under MPI): its rows are users [first, first +
  // size()) of `total`. total = 0: the whole data set.
  std::size_t first = 0, total = 0;
  std::size_t size() const noexcept { return dimension ? points.size() / dimension : 0; }
  std::size_t users() const noexcept { return total ? total : size(); }  // over every slice
};

// Locations: a CSV with lon,lat columns (projected with `projection`, centred on the data) or
// x,y columns (metres).
// `origin`: project around this lon/lat instead of the data's own centre (query files must use
// the data's frame).
Expected<Dataset> load_locations(const std::string& path, geometry::ProjectionKind projection,
                                 const std::array<double, 2>* origin = nullptr);
// Vectors (kNN), with one meaning per file: an IDX image file (by its magic number); a CSV with
// lon,lat columns is a set of locations, projected as load_locations does; any other CSV gives
// its named numeric columns — `columns` if given (each must exist), else every column whose
// first row is a number, except unnamed ones and pandas' "Unnamed: N" (an index written by
// to_csv is not a coordinate).
Expected<Dataset> load_vectors(
    const std::string& path,
    geometry::ProjectionKind projection = geometry::ProjectionKind::local_equidistant,
    const std::vector<std::string>& columns = {});
// One numeric column of a CSV (threshold).
Expected<std::vector<double>> load_column(const std::string& path, const std::string& column);
// IDX (ubyte images, gzip or plain): n × (rows·cols).
Expected<Dataset> load_idx(const std::string& path);

// Built-in defaults: the synthetic city (coordinator/synthetic_city.hpp); Fashion-MNIST from
// Debian's dataset-fashion-mnist (train and t10k) when installed.
Dataset synthetic_locations(std::size_t users, std::uint64_t seed);
inline const char* kFashionMnistTrain =
    "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
inline const char* kFashionMnistTest =
    "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

// n users drawn with replacement (seeded): user i is row hash(seed, i) mod size(), so rows
// [first, first + count) of the sample are drawn on their own (each MPI rank its slice).
Dataset resample(const Dataset& data, std::size_t n, std::uint64_t seed);
Dataset resample(const Dataset& data, std::size_t first, std::size_t count, std::size_t n,
                 std::uint64_t seed);
// Rows [first, first + count) of the synthetic city of `users` (synthetic_city.hpp).
Dataset synthetic_locations(std::size_t first, std::size_t count, std::size_t users,
                            std::uint64_t seed);

}  // namespace cgp::experiments

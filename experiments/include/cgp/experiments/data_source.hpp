// Which data an experiment runs on, in one process: the user's file, or a built-in default
// (the synthetic city, Fashion-MNIST, lognormal incomes), resampled to --n users when asked.
// cgp-sim's MPI launcher distributes the same data by rank (tools/mpi_job.hpp); the policy of
// what the default is lives here, once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/experiments/dataset.hpp"

namespace cgp::experiments {

inline constexpr std::size_t kDefaultCityUsers = 100000;
inline constexpr std::size_t kDefaultHouseholds = 10000;

struct DataSource {
  std::string path;       // empty: the built-in default
  std::size_t users = 0;  // resample to this many users (0: a file as it is, the default size)
  std::uint64_t seed = 1;
  geometry::ProjectionKind projection = geometry::ProjectionKind::local_equidistant;
};

// Locations (range, KDE, multi-range): the file's rows, or the synthetic city of `users`
// (default 100,000) users. `fleet_users` > 0 (a live fleet): exactly the first fleet_users rows,
// the ones cgp-device-swarm serves; fewer rows is an out_of_range error naming "fleet".
Expected<Dataset> source_locations(const DataSource& source, std::size_t fleet_users = 0);

// kNN: candidates, and the queries when the source has its own (Fashion-MNIST's test images;
// a file's candidates are queried leave-one-out). `columns`: as load_vectors takes them.
struct VectorData {
  Dataset candidates;
  std::optional<Dataset> queries;
};
Expected<VectorData> source_vectors(const DataSource& source,
                                    const std::vector<std::string>& columns);
// The default kNN candidates alone (Debian's dataset-fashion-mnist, train): an error naming
// "data" that says what to install, or to pass --data.
Expected<Dataset> default_vector_candidates();

// Threshold: one numeric column, or built-in households with lognormal incomes
// (median ≈ 58,000; default 10,000 households).
struct ValueColumn {
  std::vector<double> values;
  std::string description;
};
Expected<ValueColumn> source_values(const DataSource& source, const std::string& column);
std::vector<double> synthetic_incomes(std::size_t n, std::uint64_t seed);

// The file's SHA-256 as 64 hex characters (what every JSON row names its data by); empty when
// the file cannot be read (the loader then reports it by name).
std::string data_sha256(const std::string& path);

}  // namespace cgp::experiments

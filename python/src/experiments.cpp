// The experiments cgp-sim runs (sim/experiment.hpp), over a CSV, an array or the built-in data,
// with cgp-sim's defaults and seeds: the rows as the JSON text cgp-sim --json writes, which
// cgpkit/experiments.py turns into pandas frames.
#include <string>
#include <vector>

#include "binding.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/common/version.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/experiments/experiment.hpp"
#include "cgp/experiments/output.hpp"

namespace cgp::python {
namespace {

template <class T>
T setting(const py::dict& settings, const char* key) {
  if (!settings.contains(key))
    raise(make_error(ErrorCode::invalid_argument, key, std::string("missing setting ") + key));
  try {
    return settings[key].cast<T>();
  } catch (const py::cast_error&) {  // e.g. a negative count: named, not a bare RuntimeError
    raise(make_error(
        ErrorCode::invalid_argument, key,
        std::string(key) + " has the wrong type or sign: " + std::string(py::str(settings[key]))));
  }
}

// Where the users come from: a file (`data`, with its SHA-256 computed by the caller), an n × d
// array, or the built-in default of the query; resampled to `n` users when n > 0.
struct Source {
  experiments::Dataset data;
  const experiments::Dataset* queries = nullptr;  // kNN: the built-in test images
  experiments::Dataset query_set;
};

Source source_of(const std::string& query, const py::dict& s, experiments::RunInfo& info) {
  const auto path = setting<std::string>(s, "data");
  const auto points = setting<Points>(s, "points");
  const auto seed = setting<std::uint64_t>(s, "seed");
  const auto n = setting<std::size_t>(s, "n");
  const auto kind =
      value_or_raise(geometry::parse_projection_kind(setting<std::string>(s, "projection")));
  Source out;
  if (!path.empty()) {
    out.data = value_or_raise(query == "knn" ? experiments::load_vectors(path, kind)
                                             : experiments::load_locations(path, kind));
    info.data = path;
  } else if (points.size() > 0) {
    const auto [values, d] = rows_of(points);
    out.data.points.assign(values.begin(), values.end());
    out.data.dimension = d;
    out.data.description = "points from Python";
    info.data = "array";
  } else if (query == "knn") {
    out.data = value_or_raise(experiments::load_idx(experiments::kFashionMnistTrain));
    out.query_set = value_or_raise(experiments::load_idx(experiments::kFashionMnistTest));
    out.queries = &out.query_set;
    info.data = "built-in";
  } else {
    out.data = experiments::synthetic_locations(n ? n : 100000, seed);
    info.data = "built-in";
  }
  if (n && info.data != "built-in") out.data = experiments::resample(out.data, n, seed);
  return out;
}

experiments::Common common_of(const py::dict& s) {
  experiments::Common common;
  common.methods.clear();
  for (const auto& m : setting<std::vector<std::string>>(s, "methods"))
    common.methods.push_back(value_or_raise(coordinator::parse_method(m)));
  common.rounds = setting<std::vector<std::size_t>>(s, "c");
  common.splits.clear();
  for (const auto& split : setting<std::vector<std::string>>(s, "split"))
    common.splits.push_back(value_or_raise(privacy::parse_split_schedule(split)));
  common.reps = setting<std::size_t>(s, "reps");
  common.beta = setting<double>(s, "beta");
  common.seed = setting<std::uint64_t>(s, "seed");
  common.threads = setting<unsigned>(s, "threads");
  common.noise = value_or_raise(simulation::parse_noise(setting<std::string>(s, "noise")));
  return common;
}

// query: range | kde | knn | multi-range. settings: the source and common keys above, plus
// rho and param (range: w, kde: b, knn: k) or budget, m and width (multi-range).
std::string run_experiment(const std::string& query, const py::dict& settings) {
  experiments::RunInfo info;
  Source source = source_of(query, settings, info);
  const experiments::Common common = common_of(settings);
  info.data_sha256 = setting<std::string>(settings, "data_sha256");
  info.seed = common.seed;
  info.n = source.data.users();
  info.d = source.data.dimension;
  info.projection = setting<std::string>(settings, "projection");
  info.beta = common.beta;
  info.noise = setting<std::string>(settings, "noise");
  info.version = std::string(version_string());
  info.commit = CGP_GIT_COMMIT;
  std::vector<experiments::Row> rows;
  if (query == "range" || query == "kde") {
    const auto rhos = setting<std::vector<double>>(settings, "rho");
    const auto params = setting<std::vector<double>>(settings, "param");
    rows = without_gil([&] {
      return query == "range" ? experiments::run_range(source.data, rhos, params, common)
                              : experiments::run_kde(source.data, rhos, params, common);
    });
  } else if (query == "knn") {
    const auto rhos = setting<std::vector<double>>(settings, "rho");
    const auto ks = setting<std::vector<std::size_t>>(settings, "param");
    for (std::size_t k : ks)
      if (k + 1 >= source.data.users() || k >= source.data.users())  // k + 1 wraps at 2^64 − 1
        raise(make_error(ErrorCode::out_of_range, "k",
                         "k must be below the number of candidates (" +
                             std::to_string(source.data.users() - 1) + "), got " +
                             std::to_string(k)));
    rows = without_gil(
        [&] { return experiments::run_knn(source.data, source.queries, rhos, ks, common); });
  } else if (query == "multi-range") {
    const auto budget = setting<double>(settings, "budget");
    const auto ms = setting<std::vector<std::size_t>>(settings, "m");
    const auto width = setting<double>(settings, "width");
    rows = without_gil(
        [&] { return experiments::run_multi_range(source.data, budget, ms, width, common); });
  } else {
    raise(make_error(ErrorCode::invalid_argument, "query",
                     "unknown experiment '" + query + "' (range, kde, knn, multi-range)"));
  }
  return experiments::rows_json(rows, info);
}

}  // namespace

void bind_experiments(py::module_& m) {
  m.def("_run_experiment", &run_experiment);
}

}  // namespace cgp::python

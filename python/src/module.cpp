// cgpkit's Python module (issue 16): the C++ engine itself, not a re-implementation — simulated
// fleets and the queries of paper §6, privacy arithmetic and the selection accountants,
// geometry, and the experiments cgp-sim runs, as pandas frames (cgpkit/experiments.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "cgp/common/device_config.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/conversions.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/gaussian_profile.hpp"
#include "cgp/common/privacy/selection.hpp"
#include "cgp/common/privacy/selection_profiles.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/version.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/sim/dataset.hpp"
#include "cgp/sim/experiment.hpp"
#include "cgp/sim/output.hpp"
#include "cgp/simulation/simulated_fleet.hpp"

namespace py = pybind11;
using namespace cgp;

namespace {

// A cgp::Error as cgpkit.Error(code, parameter, message).
[[noreturn]] void raise(const Error& e) {
  py::object type = py::module_::import("cgpkit._errors").attr("Error");
  py::object error = type(std::string(error_code_name(e.code)), e.parameter, e.message);
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

template <class T>
T value_or_raise(Expected<T> result) {
  if (!result) raise(result.error());
  return std::move(*result);
}

using Points = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A region held as one opaque Python object (pybind11's std::variant caster would otherwise
// unwrap it into three unregistered types).
struct Region {
  geometry::Region value;
};

// An n × d array (or a 1-D array of n values, d = 1).
std::pair<std::span<const double>, std::size_t> rows_of(const Points& points) {
  if (points.ndim() == 1) return {{points.data(), static_cast<std::size_t>(points.shape(0))}, 1};
  if (points.ndim() != 2)
    raise(make_error(ErrorCode::invalid_argument, "points", "points must be an n x d array"));
  return {{points.data(), static_cast<std::size_t>(points.size())},
          static_cast<std::size_t>(points.shape(1))};
}

std::vector<double> vector_of(const Points& values) {
  return std::vector<double>(values.data(), values.data() + values.size());
}

coordinator::QueryOptions options_of(const std::string& method, std::size_t rounds,
                                     const std::string& split, double beta, bool shift) {
  coordinator::QueryOptions o;
  o.method = value_or_raise(coordinator::parse_method(method));
  o.rounds = rounds;
  o.split = value_or_raise(privacy::parse_split_schedule(split));
  o.beta = beta;
  o.shift = shift;
  return o;
}

// Runs a query with the GIL released (it may take seconds); its error raised as cgpkit.Error.
template <class Run>
auto without_gil(Run&& run) {
  auto result = [&] {
    py::gil_scoped_release unlocked;
    return run();
  }();
  return value_or_raise(std::move(result));
}

py::dict report_of(const coordinator::QueryReport& r) {
  py::dict out;
  out["rounds_used"] = r.rounds_used;
  out["asked_per_round"] = r.asked_per_round;
  out["eliminated_per_round"] = r.eliminated_per_round;
  out["charged"] =
      py::array_t<double>(static_cast<py::ssize_t>(r.charged.size()), r.charged.data());
  out["refused"] = r.refused;
  out["rejected"] = r.rejected;
  out["unanswered"] = r.unanswered;
  return out;
}

// A simulated fleet with the coordinator's budget mirror: what cgp-sim's in-process runs use.
class Fleet {
 public:
  Fleet(const Points& points, double budget, std::uint64_t seed, const std::string& noise,
        unsigned threads)
      : points_(vector_of(points)), dimension_(rows_of(points).second) {
    const auto config = value_or_raise(DeviceConfig::cgp(budget));
    simulation::SimulatedFleetOptions options;
    options.threads = threads;
    options.noise = value_or_raise(simulation::parse_noise(noise));
    fleet_.emplace(value_or_raise(
        simulation::SimulatedFleet::create(config, points_, dimension_, seed, options)));
    mirror_.emplace(fleet_->size(), fleet_->initial_budget());
  }

  std::size_t size() const { return fleet_->size(); }
  std::size_t dimension() const { return dimension_; }
  void reset(std::uint64_t seed) {
    fleet_->reset(seed);
    mirror_.emplace(fleet_->size(), fleet_->initial_budget());
  }
  py::array_t<double> spent() const {
    py::array_t<double> out(static_cast<py::ssize_t>(fleet_->size()));
    auto view = out.mutable_unchecked<1>();
    for (std::size_t u = 0; u < fleet_->size(); ++u)
      view(static_cast<py::ssize_t>(u)) = fleet_->spent(static_cast<coordinator::UserId>(u));
    return out;
  }

  py::dict range_count(const Region& region, double rho, const std::string& method,
                       std::size_t rounds, const std::string& split, double beta, bool shift) {
    const auto options = options_of(method, rounds, split, beta, shift);
    auto r = without_gil([&] {
      return coordinator::range_count(*fleet_, *mirror_, region.value,
                                      coordinator::UserCharges::everyone(coordinator::Charge{rho}),
                                      options);
    });
    py::dict out = report_of(r.report);
    out["estimate"] = r.estimate;
    return out;
  }

  py::dict kde(const Points& point, double bandwidth, double rho, const std::string& method,
               std::size_t rounds, const std::string& split, double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    const auto p = vector_of(point);
    auto r = without_gil([&] {
      return coordinator::kde(*fleet_, *mirror_, p, bandwidth,
                              coordinator::UserCharges::everyone(coordinator::Charge{rho}),
                              options);
    });
    py::dict out = report_of(r.report);
    out["estimate"] = r.estimate;
    return out;
  }

  // Alg. 3: the regions in order, each user's `budget` spread over them (AdaptiveBudget::fixed).
  py::list adaptive_range_counts(const std::vector<Region>& regions, double budget,
                                 const std::string& method, std::size_t rounds,
                                 const std::string& split, double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    const auto plan = value_or_raise(coordinator::AdaptiveBudget::fixed(budget, regions.size()));
    std::vector<geometry::Region> ranges;
    for (const Region& r : regions) ranges.push_back(r.value);
    const auto results = without_gil([&] {
      return coordinator::adaptive_range_counts(*fleet_, *mirror_, plan, ranges, options);
    });
    py::list out;
    for (const auto& r : results) {
      py::dict row = report_of(r.report);
      row["estimate"] = r.estimate;
      out.append(row);
    }
    return out;
  }

  py::dict knn(const Points& point, std::size_t k, double rho, const std::string& method,
               std::size_t rounds, const std::string& split, double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    const auto p = vector_of(point);
    auto r = without_gil([&] {
      return coordinator::knn(*fleet_, *mirror_, p, k,
                              coordinator::UserCharges::everyone(coordinator::Charge{rho}),
                              options);
    });
    py::dict out = report_of(r.report);
    out["neighbours"] = r.neighbours;
    return out;
  }

 private:
  std::vector<double> points_;  // the fleet views nothing: it copies, this keeps the input
  std::size_t dimension_;
  std::optional<simulation::SimulatedFleet> fleet_;
  std::optional<coordinator::BudgetMirror> mirror_;
};

// cgp-sim range / kde over a data set, with cgp-sim's defaults: the rows as JSON text.
std::string run_experiment(const std::string& query, const std::string& data, const Points& points,
                           const std::vector<double>& rhos, const std::vector<double>& params,
                           const std::vector<std::string>& methods,
                           const std::vector<std::size_t>& rounds,
                           const std::vector<std::string>& splits, std::size_t reps, double beta,
                           std::uint64_t seed, unsigned threads, const std::string& noise,
                           const std::string& projection) {
  sim::Dataset dataset;
  sim::RunInfo info;
  if (!data.empty()) {
    const auto kind = value_or_raise(geometry::parse_projection_kind(projection));
    dataset = value_or_raise(sim::load_locations(data, kind));
    info.data = data;
  } else if (points.size() > 0) {
    const auto [values, d] = rows_of(points);
    dataset.points.assign(values.begin(), values.end());
    dataset.dimension = d;
    dataset.description = "points from Python";
    info.data = "array";
  } else {
    dataset = sim::synthetic_locations(100000, seed);
    info.data = "built-in";
  }
  sim::Common common;
  common.methods.clear();
  for (const auto& m : methods)
    common.methods.push_back(value_or_raise(coordinator::parse_method(m)));
  common.rounds = rounds;
  common.splits.clear();
  for (const auto& s : splits)
    common.splits.push_back(value_or_raise(privacy::parse_split_schedule(s)));
  common.reps = reps;
  common.beta = beta;
  common.seed = seed;
  common.threads = threads;
  common.noise = value_or_raise(simulation::parse_noise(noise));
  info.seed = seed;
  info.n = dataset.users();
  info.d = dataset.dimension;
  info.projection = projection;
  info.beta = beta;
  info.noise = noise;
  info.version = std::string(version_string());
  info.commit = "python";
  const auto rows = without_gil([&] {
    return query == "range" ? sim::run_range(dataset, rhos, params, common)
                            : sim::run_kde(dataset, rhos, params, common);
  });
  return sim::rows_json(rows, info);
}

}  // namespace

PYBIND11_MODULE(_cgpkit, m) {
  m.doc() = "cgpkit: location analytics under local geo-privacy (the C++ engine)";
  m.attr("__version__") = std::string(version_string());

  // Geometry.
  py::class_<Region>(m, "Region", "A box, a ball or a polygon with holes.");
  m.def(
      "box",
      [](std::vector<double> lo, std::vector<double> hi) {
        return Region{value_or_raise(geometry::Box::create(lo, hi))};
      },
      py::arg("lo"), py::arg("hi"), "An axis-aligned box [lo, hi] in any dimension.");
  m.def(
      "ball",
      [](std::vector<double> centre, double radius) {
        return Region{value_or_raise(geometry::Ball::create(centre, radius))};
      },
      py::arg("centre"), py::arg("radius"), "A ball (a disc in 2-D).");
  m.def(
      "polygon",
      [](std::vector<geometry::Point2> outer, std::vector<std::vector<geometry::Point2>> holes) {
        return Region{value_or_raise(geometry::Polygon::create(outer, holes))};
      },
      py::arg("outer"), py::arg("holes") = std::vector<std::vector<geometry::Point2>>{},
      "A simple polygon with holes: lists of (x, y) vertices.");
  m.def(
      "signed_distance",
      [](const Region& region, const Points& points) {
        const auto [values, d] = rows_of(points);
        const std::size_t n = values.size() / std::max<std::size_t>(d, 1);
        py::array_t<double> out(static_cast<py::ssize_t>(n));
        {
          py::gil_scoped_release unlocked;
          geometry::signed_distances(region.value, values.data(), n, out.mutable_data());
        }
        return out;
      },
      py::arg("region"), py::arg("points"),
      "Proj_Γ (eq. 11) of each row: negative inside, positive outside (1-Lipschitz).");

  // Projections: GPS lon/lat to the metres every query is in.
  m.def(
      "project",
      [](const Points& lonlat, const std::string& kind,
         std::optional<std::array<double, 2>> origin) {
        const auto [values, d] = rows_of(lonlat);
        if (d != 2)
          raise(make_error(ErrorCode::dimension_mismatch, "lonlat", "lonlat must be n x 2"));
        const std::size_t n = values.size() / 2;
        std::vector<double> lons(n), lats(n);
        for (std::size_t i = 0; i < n; ++i) lons[i] = values[2 * i], lats[i] = values[2 * i + 1];
        const auto centre = origin ? *origin : value_or_raise(geometry::lonlat_centre(lons, lats));
        const auto projection = value_or_raise(geometry::LonLatProjection::create(
            value_or_raise(geometry::parse_projection_kind(kind)), centre[0], centre[1]));
        py::array_t<double> out({static_cast<py::ssize_t>(n), py::ssize_t{2}});
        auto view = out.mutable_unchecked<2>();
        for (std::size_t i = 0; i < n; ++i) {
          const auto xy = value_or_raise(projection.forward(lons[i], lats[i]));
          view(static_cast<py::ssize_t>(i), 0) = xy[0];
          view(static_cast<py::ssize_t>(i), 1) = xy[1];
        }
        return py::make_tuple(out, centre);
      },
      py::arg("lonlat"), py::arg("kind") = "local", py::arg("origin") = std::nullopt,
      "(lon, lat) degrees to (x, y) metres as cgp-sim projects them (local = azimuthal "
      "equidistant around the data's centre, or `origin`): returns (xy, origin).");

  // Privacy arithmetic.
  m.def(
      "split_budget",
      [](double rho, std::size_t rounds, const std::string& schedule) {
        return value_or_raise(privacy::split_budget(
            rho, rounds, value_or_raise(privacy::parse_split_schedule(schedule))));
      },
      py::arg("rho"), py::arg("rounds"), py::arg("schedule") = "even",
      "How PIE splits rho over its rounds (even or doubling).");
  m.def("device_charge", &privacy::device_charge, py::arg("rho"),
        "What a device charges for a release at rho (rounded up).");
  m.def(
      "cgp_rho_from_pure_gp",
      [](double eps) { return value_or_raise(privacy::cgp_rho_from_pure_gp(eps)); },
      py::arg("epsilon"), "Lemma 3.1: pure eps-GP gives eps^2/2-CGP.");
  m.def(
      "gp_epsilon_from_cgp",
      [](double rho, double delta, double lambda) {
        return value_or_raise(privacy::gp_epsilon_from_cgp(rho, delta, lambda)).epsilon;
      },
      py::arg("rho"), py::arg("delta"), py::arg("lam"),
      "Lemma 3.2: the (eps, delta, Lambda)-GP eps of a rho-CGP budget (rounded up).");
  m.def(
      "gaussian_delta",
      [](double mu, double eps) { return value_or_raise(privacy::gaussian_delta_upper(mu, eps)); },
      py::arg("mu"), py::arg("epsilon"), "The exact Gaussian profile delta(eps; mu), rounded up.");
  m.def(
      "gaussian_epsilon",
      [](double mu, double delta) {
        return value_or_raise(privacy::gaussian_epsilon_upper(mu, delta));
      },
      py::arg("mu"), py::arg("delta"),
      "The smallest eps with delta(eps; mu) <= delta, rounded up.");
  m.def(
      "gaussian_rnm_epsilon",
      [](std::uint64_t d, double sensitivity, double sigma, double width) {
        return value_or_raise(privacy::gaussian_rnm_epsilon(d, sensitivity, sigma, width));
      },
      py::arg("candidates"), py::arg("sensitivity"), py::arg("sigma"), py::arg("range_width"),
      "Gaussian report noisy max, pure eps (000 Thm 8/12, log form; ERRATA).");
  m.def(
      "gaussian_at_alert_epsilon",
      [](double sigma_x, double sigma_z, double lo, double hi, double threshold, std::uint64_t tick,
         double sensitivity) {
        return value_or_raise(privacy::gaussian_at_alert_epsilon(
            {sigma_x, sigma_z, lo, hi, threshold}, tick, sensitivity));
      },
      py::arg("sigma_threshold"), py::arg("sigma_query"), py::arg("lo"), py::arg("hi"),
      py::arg("threshold"), py::arg("tick"), py::arg("sensitivity"),
      "Gaussian Above Threshold, ex-post eps of an alert at `tick` (000 Lemma 18; ERRATA).");
  m.def(
      "gaussian_selection_epsilon",
      [](double expected_runs, double mu, double delta) {
        return value_or_raise(privacy::gaussian_selection_epsilon(
            privacy::RandomRuns::geometric(expected_runs), mu, delta));
      },
      py::arg("expected_runs"), py::arg("mu"), py::arg("delta"),
      "Private selection over geometric runs of a Gaussian mechanism (002 Thm 5.2).");

  // Fleets and queries.
  py::class_<Fleet>(m, "SimulatedFleet",
                    "Simulated devices, one per row of `points`, each with its own CGP filter "
                    "of `budget`; queries run the coordinator's engine over them.")
      .def(py::init<const Points&, double, std::uint64_t, const std::string&, unsigned>(),
           py::arg("points"), py::arg("budget"), py::arg("seed") = 1, py::arg("noise") = "fast",
           py::arg("threads") = 0)
      .def("__len__", &Fleet::size)
      .def_property_readonly("dimension", &Fleet::dimension)
      .def("reset", &Fleet::reset, py::arg("seed"), "Fresh budgets and noise keyed by `seed`.")
      .def("spent", &Fleet::spent, "What each device has spent (its ledger).")
      .def("range_count", &Fleet::range_count, py::arg("region"), py::arg("rho"),
           py::arg("method") = "PM1", py::arg("rounds") = 4, py::arg("split") = "even",
           py::arg("beta") = 0.1, py::arg("shift") = true,
           "Private range count (Alg. 6); each user charged at most rho.")
      .def("kde", &Fleet::kde, py::arg("point"), py::arg("bandwidth"), py::arg("rho"),
           py::arg("method") = "PM1", py::arg("rounds") = 4, py::arg("split") = "even",
           py::arg("beta") = 0.1, "Private Gaussian KDE (Alg. 7).")
      .def("knn", &Fleet::knn, py::arg("point"), py::arg("k"), py::arg("rho"),
           py::arg("method") = "PM1", py::arg("rounds") = 4, py::arg("split") = "even",
           py::arg("beta") = 0.1, "Private k nearest neighbours (Alg. 8).")
      .def("adaptive_range_counts", &Fleet::adaptive_range_counts, py::arg("regions"),
           py::arg("budget"), py::arg("method") = "PM1", py::arg("rounds") = 4,
           py::arg("split") = "even", py::arg("beta") = 0.1,
           "Alg. 3: range counts of `regions` in order, each user's budget spread over them.");

  m.def("_run_experiment", &run_experiment);
}

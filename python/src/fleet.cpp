// cgpkit.SimulatedFleet: simulated devices (each with its own CGP filter) and the coordinator's
// budget mirror, queried by the same engine cgp-sim and the coordinator service run — fixed-ρ
// queries (Alg. 6–9), the adaptive sequence (Alg. 3) and accuracy-first queries.
#include <optional>
#include <string>
#include <vector>

#include "binding.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/simulated_fleet.hpp"

namespace cgp::python {
namespace {

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

coordinator::UserCharges everyone(double rho) {
  return coordinator::UserCharges::everyone(coordinator::Charge{rho});
}

py::dict report_of(const coordinator::QueryReport& r) {
  py::dict out;
  out["rounds_used"] = r.rounds_used;
  out["asked_per_round"] = r.asked_per_round;
  out["eliminated_per_round"] = r.eliminated_per_round;
  const std::vector<double> charged = coordinator::charge_values(r.charged);
  out["charged"] = py::array_t<double>(static_cast<py::ssize_t>(charged.size()), charged.data());
  out["refused"] = r.refused;
  out["rejected"] = r.rejected;
  out["unanswered"] = r.unanswered;
  out["not_reached"] = r.not_reached;
  return out;
}

py::dict certified_of(const coordinator::CertifiedEstimate& r) {
  py::dict out = report_of(r.report);
  out["estimate"] = r.estimate;
  out["lower"] = r.lower;
  out["upper"] = r.upper;
  out["certified"] = r.certified;
  return out;
}

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
      return coordinator::range_count(*fleet_, *mirror_, region.value, everyone(rho), options);
    });
    py::dict out = report_of(r.report);
    out["estimate"] = r.estimate;
    return out;
  }

  py::dict kde(const Points& point, double bandwidth, double rho, const std::string& method,
               std::size_t rounds, const std::string& split, double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    const auto p = vector_of(point);
    auto r = without_gil(
        [&] { return coordinator::kde(*fleet_, *mirror_, p, bandwidth, everyone(rho), options); });
    py::dict out = report_of(r.report);
    out["estimate"] = r.estimate;
    return out;
  }

  py::dict knn(const Points& point, std::size_t k, double rho, const std::string& method,
               std::size_t rounds, const std::string& split, double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    const auto p = vector_of(point);
    auto r = without_gil(
        [&] { return coordinator::knn(*fleet_, *mirror_, p, k, everyone(rho), options); });
    py::dict out = report_of(r.report);
    out["neighbours"] = r.neighbours;
    return out;
  }

  py::dict threshold(coordinator::UserId user, double q, double population, double cap,
                     const std::string& method, std::size_t rounds, const std::string& split,
                     double beta) {
    const auto options = options_of(method, rounds, split, beta, true);
    auto r = without_gil([&] {
      return coordinator::threshold(*fleet_, *mirror_, user, q, population,
                                    coordinator::Charge{cap}, options);
    });
    py::dict out = report_of(r.report);
    out["below"] = r.below;
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

  py::dict range_count_to_accuracy(const Region& region, double cap, double relative,
                                   double absolute, const std::string& method,
                                   std::size_t max_rounds, double growth, double first, double beta,
                                   bool latest_release_only) {
    const auto options =
        accuracy_options(method, max_rounds, growth, first, beta, latest_release_only);
    return certified_of(without_gil([&] {
      return coordinator::range_count_to_accuracy(*fleet_, *mirror_, region.value, everyone(cap),
                                                  {relative, absolute}, options);
    }));
  }

  py::dict kde_to_accuracy(const Points& point, double bandwidth, double cap, double relative,
                           double absolute, const std::string& method, std::size_t max_rounds,
                           double growth, double first, double beta, bool latest_release_only) {
    const auto options =
        accuracy_options(method, max_rounds, growth, first, beta, latest_release_only);
    const auto p = vector_of(point);
    return certified_of(without_gil([&] {
      return coordinator::kde_to_accuracy(*fleet_, *mirror_, p, bandwidth, everyone(cap),
                                          {relative, absolute}, options);
    }));
  }

 private:
  static coordinator::AccuracyFirstOptions accuracy_options(const std::string& method,
                                                            std::size_t max_rounds, double growth,
                                                            double first, double beta,
                                                            bool latest_release_only) {
    coordinator::AccuracyFirstOptions o;
    o.method = value_or_raise(coordinator::parse_method(method));
    o.max_rounds = max_rounds;
    o.growth = growth;
    o.first = first;
    o.beta = beta;
    o.latest_release_only = latest_release_only;
    return o;
  }

  std::vector<double> points_;  // the fleet views nothing: it copies, this keeps the input
  std::size_t dimension_;
  std::optional<simulation::SimulatedFleet> fleet_;
  std::optional<coordinator::BudgetMirror> mirror_;
};

}  // namespace

void bind_fleet(py::module_& m) {
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
      .def("threshold", &Fleet::threshold, py::arg("user"), py::arg("q"), py::arg("population"),
           py::arg("cap"), py::arg("method") = "PM1", py::arg("rounds") = 4,
           py::arg("split") = "even", py::arg("beta") = 0.1,
           "Alg. 9: is user `user`'s 1-D value (a count) below q * population? The user is "
           "charged at most `cap`. Build the fleet from a 1-D array of counts.")
      .def("adaptive_range_counts", &Fleet::adaptive_range_counts, py::arg("regions"),
           py::arg("budget"), py::arg("method") = "PM1", py::arg("rounds") = 4,
           py::arg("split") = "even", py::arg("beta") = 0.1,
           "Alg. 3: range counts of `regions` in order, each user's budget spread over them.")
      .def("range_count_to_accuracy", &Fleet::range_count_to_accuracy, py::arg("region"),
           py::arg("cap"), py::arg("relative") = 0.1, py::arg("absolute") = 0.0,
           py::arg("method") = "PM1", py::arg("max_rounds") = 16, py::arg("growth") = 2.0,
           py::arg("first") = 0.0, py::arg("beta") = 0.1, py::arg("latest_release_only") = false,
           "Accuracy-first range count: stops once |estimate - C| <= max(relative*C, absolute) "
           "is certified with probability >= 1 - beta/4; each user pays only the rounds run, "
           "at most `cap`. Returns estimate, [lower, upper] and whether it certified.")
      .def("kde_to_accuracy", &Fleet::kde_to_accuracy, py::arg("point"), py::arg("bandwidth"),
           py::arg("cap"), py::arg("relative") = 0.1, py::arg("absolute") = 0.0,
           py::arg("method") = "PM1", py::arg("max_rounds") = 16, py::arg("growth") = 2.0,
           py::arg("first") = 0.0, py::arg("beta") = 0.1, py::arg("latest_release_only") = false,
           "Accuracy-first Gaussian KDE (Alg. 7 with a certified interval).");
}

}  // namespace cgp::python

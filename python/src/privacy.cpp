// cgpkit's privacy arithmetic: budget conversions and splits, what a device charges, the exact
// Gaussian profile, and the selection accountants of papers 000 and 002 (with the ERRATA forms).
#include <string>

#include "binding.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/conversions.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/gaussian_profile.hpp"
#include "cgp/common/privacy/selection.hpp"
#include "cgp/common/privacy/selection_profiles.hpp"

namespace cgp::python {

void bind_privacy(py::module_& m) {
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
}

}  // namespace cgp::python

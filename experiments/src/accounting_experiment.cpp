#include "cgp/experiments/accounting_experiment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "cgp/common/privacy/selection_profiles.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/experiments/output.hpp"

namespace cgp::experiments {
namespace {

// log of the density of the best of K ~ D_{η,γ} draws of N(shift, 1) at x: the output's CDF is
// the PGF of K at Φ(x − shift), so its density is PGF′(Φ(x − shift))·φ(x − shift), with
// PGF′(z) = γ^(η+1)·m·(1 − (1 − γ)z)^(−η−1) (002 eq. 5.1).
double log_best_density(double x, double shift, double eta, double gamma, double log_scale) {
  const double z = x - shift;
  // 1 − (1 − γ)Φ(z) = γ + (1 − γ)Φ(−z), without cancellation for large z.
  const double tail = gamma + (1 - gamma) * 0.5 * std::erfc(z / std::numbers::sqrt2);
  return log_scale - (eta + 1) * std::log(tail) - 0.5 * z * z -
         0.5 * std::log(2 * std::numbers::pi);
}

// E[K] of D_{η,γ}: the accountant's own (privacy::expected_runs), for parameters already valid.
double tnb_mean(double eta, double gamma) {
  return *privacy::expected_runs(privacy::RandomRuns::truncated_negative_binomial(eta, gamma));
}

// The smallest ε in [0, 40] with delta(ε) ≤ target (delta decreasing in ε), by bisection.
template <class Delta>
Expected<double> invert(Delta&& delta, double target) {
  double lo = 0, hi = 40;
  CGP_ASSIGN_OR_RETURN(double at_zero, delta(0.0));
  if (at_zero <= target) return 0.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    CGP_ASSIGN_OR_RETURN(double d, delta(mid));
    (d <= target ? hi : lo) = mid;
  }
  return hi;
}

// The RDP bound's δ at ε: the smallest δ whose ε is at most this one (bisection on log δ).
Expected<double> rdp_delta(const privacy::RandomRuns& runs, double mu, double epsilon) {
  double lo = std::log(1e-300), hi = std::log(0.5);
  CGP_ASSIGN_OR_RETURN(double at_hi, privacy::gaussian_selection_epsilon_rdp(runs, mu, 0.5));
  if (at_hi > epsilon) return 1.0;  // even δ = 1/2 needs more: report the trivial bound
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    CGP_ASSIGN_OR_RETURN(double e,
                         privacy::gaussian_selection_epsilon_rdp(runs, mu, std::exp(mid)));
    (e <= epsilon ? hi : lo) = mid;
  }
  return std::exp(hi);
}

Status check(const AccountingSettings& s) {
  if (s.ms.empty())
    return make_error(ErrorCode::missing_field, "m", "--m needs at least one value");
  for (double m : s.ms)
    if (!(m > 1 && m <= 1e9))
      return make_error(ErrorCode::out_of_range, "m",
                        "--m values must lie in (1, 1e9], got " + format_number(m));
  if (!(s.eta > -1 && s.eta <= 100))
    return make_error(ErrorCode::out_of_range, "eta",
                      "--eta must lie in (-1, 100], got " + format_number(s.eta));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", s.sigma));
  if (s.sigma < 0.05 || s.sigma > 1e4)
    return make_error(ErrorCode::out_of_range, "sigma",
                      "--sigma must lie in [0.05, 1e4], got " + format_number(s.sigma));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", s.delta, 1e-300, 1.0));
  for (double e : s.epsilons)
    if (!(std::isfinite(e) && e > 0 && e <= 40))
      return make_error(ErrorCode::out_of_range, "epsilons",
                        "--epsilons values must lie in (0, 40], got " + format_number(e));
  return {};
}

// γ of the truncated negative binomial with mean m (bisection: the mean falls as γ grows).
double gamma_for_mean(double eta, double m) {
  if (eta == 1) return 1 / m;
  double lo = 1e-15, hi = 1 - 1e-15;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (tnb_mean(eta, mid) > m ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace

Expected<double> best_of_gaussian_scores_delta(double eta, double gamma, double mu,
                                               double epsilon) {
  CGP_RETURN_IF_ERROR(require_open_interval("gamma", gamma, 0.0, 1.0));
  CGP_RETURN_IF_ERROR(require_finite("eta", eta));
  if (!(eta > -1 && eta <= 100))
    return make_error(ErrorCode::out_of_range, "eta",
                      "eta must lie in (-1, 100], got " + format_number(eta));
  CGP_RETURN_IF_ERROR(require_finite_positive("mu", mu));
  CGP_RETURN_IF_ERROR(require_finite("epsilon", epsilon));
  const double log_scale = (eta + 1) * std::log(gamma) + std::log(tnb_mean(eta, gamma));
  auto hockey = [&](double from, double to) {
    auto integrand = [&](double x) {
      const double p = std::exp(log_best_density(x, from, eta, gamma, log_scale));
      const double q = std::exp(epsilon + log_best_density(x, to, eta, gamma, log_scale));
      return std::max(p - q, 0.0);
    };
    using Quadrature = boost::math::quadrature::gauss_kronrod<double, 61>;
    // The best of up to ~1e9 draws lies below 7 + shift; below −12 the density is < e^-72.
    double total = 0;
    const double lo = -12, hi = 12 + mu;
    const int pieces = 48;
    for (int k = 0; k < pieces; ++k) {
      const double a = lo + (hi - lo) * k / pieces, b = lo + (hi - lo) * (k + 1) / pieces;
      total += Quadrature::integrate(integrand, a, b, 12, 1e-10);
    }
    return total;
  };
  return std::max(hockey(mu, 0), hockey(0, mu));
}

Expected<AccountingResult> run_accounting(const AccountingSettings& settings) {
  CGP_RETURN_IF_ERROR(check(settings));
  std::vector<double> epsilons = settings.epsilons;
  if (epsilons.empty())
    for (int k = 1; k <= 24; ++k) epsilons.push_back(0.25 * k);
  const double mu = 1 / settings.sigma;
  AccountingResult out;
  for (double m : settings.ms) {
    const double gamma = gamma_for_mean(settings.eta, m);
    const auto runs = privacy::RandomRuns::truncated_negative_binomial(settings.eta, gamma);
    auto exact = [&](double e) {
      return best_of_gaussian_scores_delta(settings.eta, gamma, mu, e);
    };
    AccountingRow row;
    row.m = m;
    row.gamma = gamma;
    CGP_ASSIGN_OR_RETURN(row.rdp,
                         privacy::gaussian_selection_epsilon_rdp(runs, mu, settings.delta));
    CGP_ASSIGN_OR_RETURN(row.profile,
                         privacy::gaussian_selection_epsilon(runs, mu, settings.delta));
    CGP_ASSIGN_OR_RETURN(row.exact, invert(exact, settings.delta));
    out.rows.push_back(row);
    for (double e : epsilons) {
      ProfilePoint point;
      point.m = m;
      point.epsilon = e;
      CGP_ASSIGN_OR_RETURN(point.rdp, rdp_delta(runs, mu, e));
      CGP_ASSIGN_OR_RETURN(point.profile, privacy::gaussian_selection_delta(runs, mu, e));
      CGP_ASSIGN_OR_RETURN(point.exact, exact(e));
      out.curves.push_back(point);
    }
  }
  return out;
}

void print_accounting(std::FILE* out, const AccountingSettings& s, const AccountingResult& r) {
  std::fprintf(out,
               "# private selection: the best of K ~ D(eta = %s, gamma) runs of a Gaussian "
               "mechanism (sensitivity 1, sigma %s); epsilon at delta = %s\n",
               format_number(s.eta).c_str(), format_number(s.sigma).c_str(),
               format_number(s.delta).c_str());
  std::fprintf(out, "%10s %12s %14s %16s %18s\n", "m", "gamma", "RDP (5.1)", "profile (5.2)",
               "exact (Gaussian)");
  for (const AccountingRow& row : r.rows)
    std::fprintf(out, "%10g %12.6g %14.4f %16.4f %18.4f\n", row.m, row.gamma, row.rdp, row.profile,
                 row.exact);
}

Status write_accounting_json(const std::string& path, const AccountingResult& r) {
  nlohmann::json rows = nlohmann::json::array(), curves = nlohmann::json::array();
  for (const AccountingRow& row : r.rows)
    rows.push_back({{"m", row.m},
                    {"gamma", row.gamma},
                    {"epsilon_rdp", row.rdp},
                    {"epsilon_profile", row.profile},
                    {"epsilon_exact", row.exact}});
  for (const ProfilePoint& p : r.curves)
    curves.push_back({{"m", p.m},
                      {"epsilon", p.epsilon},
                      {"delta_rdp", p.rdp},
                      {"delta_profile", p.profile},
                      {"delta_exact", p.exact}});
  std::ofstream file(path);
  if (!file || !(file << nlohmann::json{{"rows", rows}, {"curves", curves}}.dump(2) << "\n"))
    return make_error(ErrorCode::invalid_argument, "json", "--json: cannot write '" + path + "'");
  return {};
}

Status write_accounting_plot(const std::string& base, const AccountingSettings& s,
                             const AccountingResult& r) {
  const std::string script_path = base + ".gp";
  std::ofstream gp(script_path);
  if (!gp)
    return make_error(ErrorCode::invalid_argument, "plot", "--plot: cannot write " + script_path);
  const char* names[] = {"RDP bound (002 Thm 5.1)", "profile bound (002 Thm 5.2)",
                         "exact, best of K Gaussian scores"};
  for (std::size_t k = 0; k < r.rows.size(); ++k) {
    gp << "$m" << k << " << EOD\n";
    for (const ProfilePoint& p : r.curves)
      if (p.m == r.rows[k].m)
        gp << fmt::format("{:.10g} {:.10g} {:.10g} {:.10g}\n", p.epsilon, std::max(p.rdp, 1e-300),
                          std::max(p.profile, 1e-300), std::max(p.exact, 1e-300));
    gp << "EOD\n";
  }
  gp << "$eps << EOD\n";
  for (const AccountingRow& row : r.rows)
    gp << fmt::format("{:.10g} {:.10g} {:.10g} {:.10g}\n", row.m, row.rdp, row.profile, row.exact);
  gp << "EOD\n";
  const std::size_t columns = r.rows.size() + 1;
  for (const char* terminal : {"svg", "png"}) {
    if (std::string(terminal) == "svg")
      gp << fmt::format("set terminal svg size {},{} dynamic font 'sans,11'\n", 360 * columns, 380);
    else
      gp << fmt::format("set terminal png size {},{} font 'sans,10'\n", 360 * columns, 380);
    gp << "set output '" << base << "." << terminal << "'\n";
    gp << fmt::format("set multiplot layout 1,{}\n", columns);
    gp << "set key bottom left font ',8'\nset grid\nset logscale y\nset format y '1e%T'\n";
    gp << "set yrange [1e-12:1]\nset xlabel 'epsilon'\nset ylabel 'delta'\n";
    for (std::size_t k = 0; k < r.rows.size(); ++k) {
      gp << "set title 'm = " << fmt::format("{:g}", r.rows[k].m) << "'\nplot ";
      for (int c = 0; c < 3; ++c)
        gp << (c ? ", " : "") << "$m" << k << " using 1:" << c + 2 << " with lines lw 2 title '"
           << names[c] << "'";
      gp << "\n";
    }
    gp << "set title 'epsilon at delta = " << fmt::format("{:g}", s.delta) << "'\n";
    gp << "set logscale x\nunset logscale y\nset format y '%g'\nset yrange [*:*]\n";
    gp << "set key top left\nset xlabel 'm'\nset ylabel 'epsilon'\nplot ";
    for (int c = 0; c < 3; ++c)
      gp << (c ? ", " : "") << "$eps using 1:" << c + 2 << " with linespoints title '" << names[c]
         << "'";
    gp << "\nunset logscale x\nunset multiplot\n";
  }
  gp.close();
  return run_gnuplot(script_path);
}

}  // namespace cgp::experiments

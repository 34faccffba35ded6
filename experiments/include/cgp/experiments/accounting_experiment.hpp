// cgp-sim accounting: the privacy profile of private selection with a random
// number of runs (seed 002's Fig. 2 and Fig. 3 setting): Report-the-best of K ~ D_{η,γ} runs
// of a Gaussian mechanism, bounded three ways — the RDP bound (002 Thm 5.1), the profile bound
// (002 Thm 5.2) — and the exact profile of one instance, the best of K Gaussian scores, which
// every sound bound must lie above.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::experiments {

struct AccountingSettings {
  std::vector<double> ms{30, 300, 3000};  // expected runs m (η = 1: γ = 1/m)
  double eta = 1;
  double sigma = 4;  // the base mechanism: sensitivity 1, noise σ
  double delta = 1e-6;
  std::vector<double> epsilons;  // the δ(ε) curves; empty: 0.25, 0.5, ..., 6
};

struct AccountingRow {
  double m = 0, gamma = 0;
  double rdp = 0, profile = 0, exact = 0;  // ε at the settings' δ
};

struct ProfilePoint {
  double m = 0, epsilon = 0;
  double rdp = 0, profile = 0, exact = 0;  // δ at ε (rdp: the smallest δ whose ε is ≤ this one)
};

struct AccountingResult {
  std::vector<AccountingRow> rows;
  std::vector<ProfilePoint> curves;
};

// The exact δ(ε) of the best of K ~ D_{η,γ} scores N(μ, 1) against N(0, 1) (both directions,
// the larger), by quadrature over the output's density φ′_K(F(x − μ))·φ(x − μ).
Expected<double> best_of_gaussian_scores_delta(double eta, double gamma, double mu, double epsilon);

Expected<AccountingResult> run_accounting(const AccountingSettings& settings);
void print_accounting(std::FILE* out, const AccountingSettings& settings,
                      const AccountingResult& result);
Status write_accounting_json(const std::string& path, const AccountingResult& result);
// OUT.png and OUT.svg: δ(ε) per m (log δ), the three curves; and ε at δ against m.
Status write_accounting_plot(const std::string& base, const AccountingSettings& settings,
                             const AccountingResult& result);

}  // namespace cgp::experiments

// cgp-sim's outputs: the table on stdout, the JSON rows, the gnuplot figures.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/sim/experiment.hpp"

namespace cgp::sim {

// The error metric of a query: CountErr, l1-Err, DistErr, or the wrong-answer rate.
std::string metric_name(const std::string& query);
std::string param_name(const std::string& query);

void print_table(std::FILE* out, const std::vector<Row>& rows);
// Keys: query, method, c, split, rho, param, reps, error_mean, error_p25, error_p75,
// privsav_mean, privsav_p25, privsav_p75, seconds, noise, released; accuracy rows add target,
// growth, certified (null for the fixed-ρ baseline), rho_mean, rho_p95, rounds.
Status write_json(const std::string& path, const std::vector<Row>& rows);
// OUT.png and OUT.svg with gnuplot: one column per parameter value, error (top) and PrivSav
// (bottom) against ρ (or against the parameter when only one ρ was run), one line per method.
Status write_plot(const std::string& base, const std::vector<Row>& rows);
// Runs gnuplot on a script it wrote (and removes the script); a named "plot" error if it fails.
Status run_gnuplot(const std::string& script_path);

}  // namespace cgp::sim

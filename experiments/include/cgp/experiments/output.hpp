// cgp-sim's outputs: the table on stdout, the JSON rows, the gnuplot figures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/experiments/experiment.hpp"

namespace cgp::experiments {

// The error metric of a query: CountErr, l1-Err, DistErr, or the wrong-answer rate.
std::string metric_name(const std::string& query);
std::string param_name(const std::string& query);

// What a run was made of, written into every JSON row so that a file of rows says how to
// make it again: the seed, the data file and its SHA-256 (empty: built-in data), users n and
// dimension d, the projection, β, the noise mode, cgpkit's version and the git commit it was
// built from.
struct RunInfo {
  std::uint64_t seed = 0;
  std::string data, data_sha256;
  std::size_t n = 0, d = 0;
  std::string projection;
  double beta = 0;
  std::string noise;
  std::string version, commit;
};

// The table, then a legend with each column's meaning and unit.
void print_table(std::FILE* out, const std::vector<Row>& rows);
// Keys: query, method, c, split, rho, param, reps, error_mean, error_p25, error_p75,
// privsav_mean, privsav_p25, privsav_p75, seconds, noise, released; accuracy rows add target,
// growth, certified (null for the fixed-ρ baseline), rho_mean, rho_p95, rounds.
Status write_json(const std::string& path, const std::vector<Row>& rows, const RunInfo& info = {});
// The same rows as JSON text (the Python package's frames are made from it).
std::string rows_json(const std::vector<Row>& rows, const RunInfo& info = {});
// One JSON row per repetition: the row's keys without the summaries, plus rep, error, privsav.
Status write_per_rep(const std::string& path, const std::vector<Row>& rows,
                     const RunInfo& info = {});
// OUT.png and OUT.svg with gnuplot: one column per parameter value, error (top) and PrivSav
// (bottom) against ρ (or against the parameter when only one ρ was run), one line per method.
Status write_plot(const std::string& base, const std::vector<Row>& rows);
// Runs gnuplot on a script it wrote (and removes the script); a named "plot" error if it fails.
Status run_gnuplot(const std::string& script_path);

}  // namespace cgp::experiments

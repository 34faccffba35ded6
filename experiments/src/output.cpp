#include "cgp/experiments/output.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cgp/common/validate.hpp"

namespace cgp::experiments {
namespace {

std::string variant_label(const Row& r) {
  if (r.split == "none") return r.method;
  return fmt::format("{}-c{}{}", r.method, r.c, r.split == "doubling" ? "-log" : "");
}

}  // namespace

std::string metric_name(const std::string& query) {
  if (query == "range" || query == "multi-range" || query == "accuracy") return "CountErr";
  if (query == "kde") return "l1-Err";
  if (query == "top-regions") return "WrongSet";
  if (query == "accuracy-kde") return "RelErr";
  if (query == "knn") return "DistErr";
  return "WrongRate";
}

std::string param_name(const std::string& query) {
  if (query == "range" || query == "accuracy") return "w";
  if (query == "top-regions") return "cell";
  if (query == "accuracy-kde") return "b";
  if (query == "multi-range") return "m";
  if (query == "kde") return "b";
  if (query == "knn") return "k";
  return "q";
}

namespace {

// Accuracy-first rows: the target and what reaching it took.
void print_accuracy_table(std::FILE* out, const std::vector<Row>& rows) {
  const bool sequence = rows.front().query == "multi-range";
  fmt::print(out,
             "{:<10} {:>6} {:>6} {:>4} {:>10} {:>7} {:>5} {:>10} {:>10} {:>10} {:>7} {:>10} "
             "{:>10} {:>7} {:>9}\n",
             "method", "target", "growth", "c", sequence ? "budget" : "cap",
             param_name(rows.front().query), "reps", metric_name(rows.front().query), "p75",
             "certified", "within", "rho/user", "p95 rho", "rounds", "seconds");
  auto share = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.0f}%", 100 * *v) : std::string("-");
  };
  for (const Row& r : rows) {
    const Row::Accuracy& a = *r.accuracy;
    fmt::print(out,
               "{:<10} {:>6.3g} {:>6.3g} {:>4} {:>10.3g} {:>7.4g} {:>5} {:>10.4g} {:>10.4g} "
               "{:>10} {:>7} {:>10.3g} {:>10.3g} {:>7.2f} {:>9.3f}\n",
               r.method, a.target, a.growth, r.c, r.rho, r.param, r.reps, r.error.mean, r.error.p75,
               share(a.certified), share(a.correct), a.rho_mean, a.rho_p95, a.rounds, r.seconds);
  }
}

// Top-regions rows: how often the true top k came back, and what it cost.
void print_top_regions_table(std::FILE* out, const std::vector<Row>& rows) {
  fmt::print(out,
             "{:<6} {:>4} {:>6} {:>4} {:>10} {:>7} {:>5} {:>8} {:>10} {:>10} {:>10} {:>7} "
             "{:>9}\n",
             "method", "k", "growth", "c", "cap", "cell", "reps", "correct", "certified",
             "rho/user", "p95 rho", "rounds", "seconds");
  for (const Row& r : rows) {
    const Row::Accuracy& a = *r.accuracy;
    const std::string certified =
        a.certified ? fmt::format("{:.0f}%", 100 * *a.certified) : std::string("-");
    fmt::print(out,
               "{:<6} {:>4} {:>6.3g} {:>4} {:>10.3g} {:>7.4g} {:>5} {:>7.0f}% {:>10} {:>10.3g} "
               "{:>10.3g} {:>7.2f} {:>9.3f}\n",
               r.method, a.k, a.growth, r.c, r.rho, r.param, r.reps, 100 * a.correct.value_or(0),
               certified, a.rho_mean, a.rho_p95, a.rounds, r.seconds);
  }
}

}  // namespace

namespace {

std::string metric_meaning(const std::string& query) {
  if (query == "range" || query == "multi-range" || query == "accuracy")
    return "CountErr = |estimate - true count| / users";
  if (query == "kde")
    return "l1-Err = |estimate - true density| (density per m^2, Gaussian kernel)";
  if (query == "knn") return "DistErr = sum of distances of the k found / of the true k, minus 1";
  return "WrongRate = share of wrong answers";
}

std::string param_meaning(const std::string& query) {
  if (query == "range") return "w = square side (m)";
  if (query == "kde") return "b = bandwidth (m)";
  if (query == "knn") return "k = neighbours";
  if (query == "multi-range") return "m = queries sharing each user's budget";
  return "q = fraction of the population";
}

void print_legend(std::FILE* out, const std::string& query) {
  fmt::print(out,
             "# {}; mean, p25, median, p75 over the repetitions (the mean of a heavy-tailed "
             "error may lie outside [p25, p75]).\n# rho = what each user may be charged in one "
             "repetition (per m^2 "
             "for locations; multi-range: the budget B); {}; PrivSav = share of rho the users "
             "kept; seconds = wall time of all repetitions.\n",
             metric_meaning(query), param_meaning(query));
}

}  // namespace

void print_table(std::FILE* out, const std::vector<Row>& rows) {
  if (rows.empty()) return;
  if (rows.front().query == "top-regions") return print_top_regions_table(out, rows);
  if (rows.front().accuracy) return print_accuracy_table(out, rows);
  const std::string metric = metric_name(rows.front().query);
  fmt::print(out,
             "{:<12} {:<6} {:>4} {:<9} {:>10} {:>9} {:>5} {:>11} {:>11} {:>11} {:>11} {:>8} "
             "{:>8} {:>8} {:>9}\n",
             "query", "method", "c", "split", "rho", param_name(rows.front().query), "reps",
             metric + "", "p25", "median", "p75", "PrivSav", "p25", "p75", "seconds");
  for (const Row& r : rows) {
    fmt::print(out,
               "{:<12} {:<6} {:>4} {:<9} {:>10.3g} {:>9.4g} {:>5} {:>11.4g} {:>11.4g} {:>11.4g} "
               "{:>11.4g} {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>9.3f}\n",
               r.query, r.method, r.c, r.split, r.rho, r.param, r.reps, r.error.mean, r.error.p25,
               r.error.median, r.error.p75, 100 * r.privsav.mean, 100 * r.privsav.p25,
               100 * r.privsav.p75, r.seconds);
  }
  print_legend(out, rows.front().query);
}

namespace {

void add_run_info(nlohmann::json& row, const RunInfo& info) {
  row["seed"] = info.seed;
  row["data"] = info.data;
  row["data_sha256"] =
      info.data_sha256.empty() ? nlohmann::json() : nlohmann::json(info.data_sha256);
  row["n"] = info.n;
  row["d"] = info.d;
  row["projection"] = info.projection;
  row["beta"] = info.beta;
  row["version"] = info.version;
  row["commit"] = info.commit;
}

// Written beside the target and renamed over it: a reader (or an interrupted run) never sees
// half a file.
Status write_atomically(const std::string& path, const std::string& text, const char* flag) {
  const std::string temporary = path + ".partial";
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!file || !(file << text))
      return make_error(ErrorCode::invalid_argument, flag,
                        std::string("--") + flag + ": cannot write " + path);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return make_error(ErrorCode::invalid_argument, flag,
                      std::string("--") + flag + ": cannot write " + path);
  }
  return {};
}

nlohmann::json row_keys(const Row& r, const RunInfo& info) {
  nlohmann::json row{{"query", r.query},
                     {"method", r.method},
                     {"c", r.c},
                     {"split", r.split},
                     {"rho", r.rho},
                     {"param", r.param},
                     {"param_name", param_name(r.query)},
                     {"reps", r.reps},
                     {"noise", r.noise}};
  add_run_info(row, info);
  return row;
}

}  // namespace

Status write_per_rep(const std::string& path, const std::vector<Row>& rows, const RunInfo& info) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows)
    for (std::size_t rep = 0; rep < r.per_rep_error.size(); ++rep) {
      nlohmann::json row = row_keys(r, info);
      row["rep"] = rep;
      row["error"] = r.per_rep_error[rep];
      row["privsav"] = rep < r.per_rep_privsav.size() ? r.per_rep_privsav[rep] : 0.0;
      out.push_back(std::move(row));
    }
  return write_atomically(path, out.dump(2) + "\n", "per-rep");
}

Status write_json(const std::string& path, const std::vector<Row>& rows, const RunInfo& info) {
  return write_atomically(path, rows_json(rows, info), "json");
}

std::string rows_json(const std::vector<Row>& rows, const RunInfo& info) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json row = row_keys(r, info);
    row["error_mean"] = r.error.mean;
    row["error_p25"] = r.error.p25;
    row["error_median"] = r.error.median;
    row["error_p75"] = r.error.p75;
    row["privsav_mean"] = r.privsav.mean;
    row["privsav_p25"] = r.privsav.p25;
    row["privsav_median"] = r.privsav.median;
    row["privsav_p75"] = r.privsav.p75;
    row["seconds"] = r.seconds;
    row["released"] = r.released ? nlohmann::json(*r.released) : nlohmann::json();
    if (r.accuracy) {
      const Row::Accuracy& a = *r.accuracy;
      row["target"] = a.target;
      row["growth"] = a.growth;
      row["certified"] = a.certified ? nlohmann::json(*a.certified) : nlohmann::json();
      row["rho_mean"] = a.rho_mean;
      row["rho_p95"] = a.rho_p95;
      row["rounds"] = a.rounds;
      if (r.query == "top-regions") {
        row["k"] = a.k;
        row["correct"] = a.correct ? nlohmann::json(*a.correct) : nlohmann::json();
        row.erase("target");
      } else if (a.correct) {
        row["within_target"] = *a.correct;
      }
    }
    out.push_back(std::move(row));
  }
  return out.dump(2) + "\n";
}

Status write_plot(const std::string& base, const std::vector<Row>& rows) {
  if (rows.empty()) return {};
  std::set<double> rhos, params;
  for (const Row& r : rows) rhos.insert(r.rho), params.insert(r.param);
  const bool against_rho = rhos.size() > 1;
  const std::set<double>& panels = against_rho ? params : rhos;
  std::vector<std::string> labels;
  for (const Row& r : rows)
    if (std::find(labels.begin(), labels.end(), variant_label(r)) == labels.end())
      labels.push_back(variant_label(r));

  const std::string script_path = base + ".gp";
  std::ofstream gp(script_path);
  if (!gp)
    return make_error(ErrorCode::invalid_argument, "plot", "--plot: cannot write " + script_path);
  const std::string metric = metric_name(rows.front().query);
  const std::string pname = param_name(rows.front().query);
  // Inline data blocks: one per (panel, variant): x, error mean, p25, p75, privsav mean, p25, p75.
  std::size_t block = 0;
  std::map<std::pair<double, std::string>, std::size_t> blocks;
  for (double panel : panels) {
    for (const auto& label : labels) {
      gp << "$d" << block << " << EOD\n";
      for (const Row& r : rows) {
        if (variant_label(r) != label || (against_rho ? r.param : r.rho) != panel) continue;
        gp << fmt::format("{:.10g} {:.10g} {:.10g} {:.10g} {:.10g} {:.10g} {:.10g}\n",
                          against_rho ? r.rho : r.param, r.error.mean, r.error.p25, r.error.p75,
                          100 * r.privsav.mean, 100 * r.privsav.p25, 100 * r.privsav.p75);
      }
      gp << "EOD\n";
      blocks[{panel, label}] = block++;
    }
  }
  const std::size_t columns = panels.size();
  const bool positive_errors =
      std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.error.mean > 0; });
  for (const char* terminal : {"svg", "png"}) {
    if (std::string(terminal) == "svg")
      gp << fmt::format("set terminal svg size {},{} dynamic font 'sans,11'\n", 360 * columns + 40,
                        620);
    else
      gp << fmt::format("set terminal png size {},{} font 'sans,10'\n", 360 * columns + 40, 620);
    gp << "set output '" << base << "." << terminal << "'\n";
    gp << fmt::format("set multiplot layout 2,{}\n", columns);
    gp << "set key top right font ',8'\nset grid\n";
    if (against_rho)
      gp << "set logscale x\nset format x '%.0e'\n";
    else
      gp << "unset logscale x\nset format x '%g'\n";
    for (int panel_row = 0; panel_row < 2; ++panel_row) {
      // Errors span orders of magnitude: log scale when every mean is positive.
      if (panel_row == 0 && positive_errors)
        gp << "set logscale y\n";
      else
        gp << "unset logscale y\n";
      for (double panel : panels) {
        gp << "set title '" << (against_rho ? pname : std::string("rho")) << " = "
           << fmt::format("{:g}", panel) << "'\n";
        gp << "set xlabel '" << (against_rho ? "rho" : pname) << "'\n";
        gp << "set ylabel '" << (panel_row == 0 ? metric : std::string("PrivSav (%)")) << "'\n";
        gp << "plot ";
        bool first = true;
        for (const auto& label : labels) {
          const std::size_t b = blocks[{panel, label}];
          gp << (first ? "" : ", ") << "$d" << b << " using 1:" << (panel_row == 0 ? 2 : 5)
             << " with linespoints title '" << label << "'";
          first = false;
        }
        gp << "\n";
      }
    }
    gp << "unset multiplot\n";
  }
  gp.close();
  return run_gnuplot(script_path);
}

Status run_gnuplot(const std::string& script_path) {
  const std::string command = "gnuplot '" + script_path + "' 2>&1";
  if (std::system(command.c_str()) != 0)
    return make_error(ErrorCode::invalid_argument, "plot",
                      "--plot: gnuplot failed (is gnuplot-nox installed?) on " + script_path);
  std::remove(script_path.c_str());
  return {};
}

}  // namespace cgp::experiments

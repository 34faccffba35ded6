// cgp-sim: the paper's experiments (Liang & Yi, §7 and Appendix C) over simulated devices.
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cgp/common/device_config.hpp"
#include "cgp/common/files.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/version.hpp"
#include "cgp/experiments/accounting_experiment.hpp"
#include "cgp/experiments/data_source.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/experiments/experiment.hpp"
#include "cgp/experiments/output.hpp"
#include "cgp/experiments/watch_experiment.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"
#include "mpi_job.hpp"
#include "sim_remote_backend.hpp"

using namespace cgp;
using namespace cgp::experiments;

namespace {

constexpr int kUsageError = 2;  // bad arguments or parameter values
constexpr int kDataError = 3;   // missing, unreadable or invalid data

struct Arguments {
  std::string data, queries, json, plot, column;
  std::vector<std::string> columns;  // knn: the CSV columns that form each vector
  std::string per_rep;               // --per-rep FILE
  std::vector<double> rho, w, b, q;
  std::vector<std::size_t> k, m;
  double budget = 0, below = NAN, width = 0;
  std::vector<std::string> methods{"BM0", "BM1", "PM0", "PM1"};
  std::vector<std::size_t> c{4};
  std::vector<std::string> split{"even"};
  std::size_t reps = 20, n = 0;
  double beta = 0.1;
  std::uint64_t seed = 1;
  unsigned threads = 0;
  std::string projection = "local";
  std::string noise = "fast";
  bool no_shift = false;
  std::string fleet, analyst_credential, tls_root, curator;
  AccuracySettings accuracy;      // cgp-sim accuracy
  TopRegionsSettings top;         // cgp-sim top-regions
  double multi_target = 0;        // multi-range --target
  WatchSettings watch;            // cgp-sim watch (its own flags: no common options)
  AccountingSettings accounting;  // cgp-sim accounting (likewise)
};

// Under mpirun only rank 0 speaks (the ranks agree on every error first).
bool g_quiet = false;

int fail(int code, const std::string& message) {
  if (!g_quiet) std::fprintf(stderr, "cgp-sim: %s\n", message.c_str());
  return code;
}

Status positive_list(const char* name, const std::vector<double>& values) {
  if (values.empty())
    return make_error(ErrorCode::missing_field, name,
                      std::string("--") + name + " needs at least one value");
  for (double v : values)
    if (!(std::isfinite(v) && v > 0))
      return make_error(ErrorCode::not_positive, name,
                        std::string("--") + name + " values must be finite and positive, got " +
                            format_number(v));
  return {};
}

// Square sides: 1 mm to 10,000 km, so that a square around any projected centre is a box the
// geometry takes (on 3f97682 1e308 and 1e-300 ended in "internal error").
Status side_list(const char* name, const std::vector<double>& values) {
  CGP_RETURN_IF_ERROR(positive_list(name, values));
  for (double v : values)
    if (!(v >= 1e-3 && v <= 1e7))
      return make_error(ErrorCode::out_of_range, name,
                        std::string("--") + name + " values must be in [0.001, 1e7] metres, got " +
                            format_number(v));
  return {};
}

// ρ values become device budgets: positive, finite, and within what a device supports
// (DeviceConfig::cgp), each error naming the flag and quoting the value as given.
Status rho_list(const char* name, const std::vector<double>& values) {
  CGP_RETURN_IF_ERROR(positive_list(name, values));
  for (double v : values)
    if (auto config = DeviceConfig::cgp(v); !config)
      return make_error(
          config.error().code, name,
          std::string("--") + name + " " + format_number(v) + ": " + config.error().message);
  return {};
}

Status count_list(const char* name, const std::vector<std::size_t>& values) {
  if (values.empty())
    return make_error(ErrorCode::missing_field, name,
                      std::string("--") + name + " needs at least one value");
  for (std::size_t v : values)
    if (v == 0)
      return make_error(ErrorCode::out_of_range, name,
                        std::string("--") + name + " values must be >= 1, got 0");
  return {};
}

// --json and --plot are checked before a run that may take hours: a file that cannot be
// written, or a base that names a device or a directory, is an error now, not at the end.
// A file a run will write: a regular file (or none yet) that can be opened for writing.
Status check_file_output(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return {};
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (existed && !fs::is_regular_file(path, ec))
    return make_error(ErrorCode::invalid_argument, flag,
                      std::string("--") + flag + ": " + path + " is not a regular file");
  if (!std::ofstream(path, std::ios::app))
    return make_error(ErrorCode::invalid_argument, flag,
                      std::string("--") + flag + ": cannot write " + path);
  if (!existed) fs::remove(path, ec);
  return {};
}

Status check_outputs(const Arguments& a) {
  namespace fs = std::filesystem;
  CGP_RETURN_IF_ERROR(check_file_output("json", a.json));
  CGP_RETURN_IF_ERROR(check_file_output("per-rep", a.per_rep));
  if (!a.plot.empty()) {
    std::error_code ec;
    if (fs::exists(a.plot, ec) && !fs::is_regular_file(a.plot, ec))
      return make_error(ErrorCode::invalid_argument, "plot",
                        "--plot takes a base name for OUT.png and OUT.svg; " + a.plot +
                            " is a device or a directory");
    const fs::path parent = fs::path(a.plot).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
      return make_error(ErrorCode::invalid_argument, "plot",
                        "--plot: the directory " + parent.string() + " does not exist");
  }
  return {};
}

Expected<Common> common_from(const Arguments& a, std::size_t ranks) {
  Common common;
  common.methods.clear();
  for (const auto& name : a.methods) {
    auto m = coordinator::parse_method(name);
    if (!m)
      return make_error(ErrorCode::invalid_argument, "methods", "--methods: " + m.error().message);
    common.methods.push_back(*m);
  }
  CGP_RETURN_IF_ERROR(count_list("c", a.c));
  for (std::size_t c : a.c)
    if (c > privacy::kMaxRounds)
      return make_error(ErrorCode::out_of_range, "c",
                        "--c values must be <= 256, got " + std::to_string(c));
  common.rounds = a.c;
  common.splits.clear();
  for (const auto& name : a.split) {
    auto s = privacy::parse_split_schedule(name);
    if (!s)
      return make_error(ErrorCode::invalid_argument, "split",
                        "--split must be even or double, got '" + name + "'");
    common.splits.push_back(*s);
  }
  if (a.reps == 0 || a.reps > 1000000)  // -1 arrives wrapped to 2^64 - 1
    return make_error(ErrorCode::out_of_range, "reps",
                      "--reps must be in [1, 1000000], got " + std::to_string(a.reps));
  if (!(a.beta > 0 && a.beta < 1))
    return make_error(ErrorCode::out_of_range, "beta",
                      "--beta must be in (0, 1), got " + format_number(a.beta));
  common.reps = a.reps;
  common.beta = a.beta;
  common.seed = a.seed;
  // Threads beyond this only contend; and each one is a stack the system may refuse.
  constexpr unsigned kMaxThreads = 1024;
  if (a.threads > kMaxThreads)
    return make_error(ErrorCode::out_of_range, "threads",
                      "--threads must be at most " + std::to_string(kMaxThreads) +
                          " (0 = all "
                          "cores), got " +
                          std::to_string(a.threads));
  // Each simulated user holds at least ~100 bytes (72 measured, README "Scaling out"): refuse
  // an --n whose share per process cannot fit in this machine.
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                        static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const double per_process = static_cast<double>(a.n) / static_cast<double>(ranks) * 100;
  if (a.n > 0 && per_process > memory)
    return make_error(ErrorCode::out_of_range, "n",
                      "--n " + std::to_string(a.n) + " users need at least " +
                          format_number(std::ceil(per_process / (1 << 30))) +
                          " GiB per process; this machine has " +
                          format_number(std::floor(memory / (1 << 30))) + " GiB");
  common.threads = a.threads;
  common.shift = !a.no_shift;
  auto noise = simulation::parse_noise(a.noise);
  if (!noise) return make_error(ErrorCode::invalid_argument, "noise", "--" + noise.error().message);
  common.noise = *noise;
  return common;
}

// Every rank's users: none may be empty (a shard of nobody is a job with too many ranks).
Status check_slice(const Dataset& data, const tools::MpiJob& job) {
  if (data.size() > 0) return {};
  return make_error(ErrorCode::out_of_range, "n",
                    std::to_string(data.users()) + " users over " + std::to_string(job.size()) +
                        " ranks leave this rank none (ranks hold whole blocks of " +
                        std::to_string(coordinator::sum_block(data.users())) +
                        " users): use fewer ranks or more users");
}

// Under mpirun: this rank's slice of a data set that rank 0 loads (`load`, called on rank 0
// only) — scattered, or broadcast and resampled per global id with --n.
template <class Load>
Expected<Dataset> load_slice(const Arguments& a, tools::MpiJob& job, Load&& load) {
  Dataset whole;
  Status loaded;
  if (job.rank() == 0) {
    auto data = load();
    if (data)
      whole = std::move(*data);
    else
      loaded = data.error();
  }
  CGP_RETURN_IF_ERROR(job.agree(std::move(loaded)));
  Dataset mine;
  if (a.n) {
    whole = job.broadcast(std::move(whole));
    const auto slice = coordinator::shard_slice(a.n, job.rank(), job.size());
    mine = resample(whole, slice.first, slice.size, a.n, a.seed);
  } else {
    mine = job.scatter(std::move(whole));
  }
  CGP_RETURN_IF_ERROR(job.agree(check_slice(mine, job)));
  return mine;
}

DataSource source_of(const Arguments& a, geometry::ProjectionKind projection) {
  return {.path = a.data, .users = a.n, .seed = a.seed, .projection = projection};
}

// Locations for range, kde, multi-range (source_locations). Under mpirun (job): this rank's
// slice; the synthetic city is made per rank.
Expected<Dataset> locations(const Arguments& a, geometry::ProjectionKind projection,
                            std::size_t fleet_users = 0, tools::MpiJob* job = nullptr) {
  if (job) {
    if (!a.data.empty())
      return load_slice(a, *job, [&] { return load_locations(a.data, projection); });
    const std::size_t users = a.n ? a.n : kDefaultCityUsers;
    const auto slice = coordinator::shard_slice(users, job->rank(), job->size());
    Dataset mine = synthetic_locations(slice.first, slice.size, users, a.seed);
    CGP_RETURN_IF_ERROR(job->agree(check_slice(mine, *job)));
    return mine;
  }
  return source_locations(source_of(a, projection), fleet_users);
}

Expected<analyst::AnalystClient> connect_fleet(const Arguments& a) {
  analyst::AnalystConnection connection;
  connection.coordinator_address = a.fleet;
  if (!a.analyst_credential.empty()) {
    CGP_ASSIGN_OR_RETURN(auto secret,
                         cgp::read_secret(a.analyst_credential, "--analyst-credential"));
    connection.credential = std::move(secret);
  }
  if (!a.tls_root.empty()) {
    CGP_ASSIGN_OR_RETURN(auto root, cgp::read_file(a.tls_root, "--tls-root"));
    connection.tls_root_certificate = std::move(root);
  }
  return analyst::AnalystClient::connect(connection);
}

Status load_centres(const Arguments& a, const Dataset& data, geometry::ProjectionKind projection,
                    Common& common) {
  if (a.queries.empty()) return {};
  CGP_ASSIGN_OR_RETURN(auto centres, load_locations(a.queries, projection, &data.origin));
  for (std::size_t i = 0; i < centres.size(); ++i)
    common.centres.push_back({centres.points[2 * i], centres.points[2 * i + 1]});
  return {};
}

// What every JSON row says about the run (RunInfo); users and dimension are noted when the data
// is loaded, before the first row.
RunInfo g_run;

void note_data(std::size_t users, std::size_t dimension) {
  g_run.n = users;
  g_run.d = dimension;
}

int finish(const Arguments& a, const std::string& description, const std::vector<Row>& rows) {
  if (g_quiet) return 0;  // rank 0 writes
  std::printf("# %s\n", description.c_str());
  print_table(stdout, rows);
  if (!a.json.empty())
    if (auto s = write_json(a.json, rows, g_run); !s) return fail(kDataError, s.error().message);
  if (!a.per_rep.empty())
    if (auto s = write_per_rep(a.per_rep, rows, g_run); !s)
      return fail(kDataError, s.error().message);
  if (!a.plot.empty())
    if (auto s = write_plot(a.plot, rows); !s) return fail(kDataError, s.error().message);
  return 0;
}

// What every experiment runs with, from the common flags.
struct Context {
  Common common;
  geometry::ProjectionKind projection;
  std::size_t fleet_users = 0;   // --fleet: the coordinator's enrolled devices
  double fleet_budget = 0;       // --fleet: each device's budget
  tools::MpiJob* job = nullptr;  // under mpirun
  bool remote() const noexcept { return common.fleet != nullptr; }
};

int report(const Arguments& a, const std::string& description,
           const Expected<std::vector<Row>>& rows) {
  if (!rows) return fail(kDataError, rows.error().message);
  return finish(a, description, *rows);
}

int run_locations(const Arguments& a, Context& context, const char* param_name,
                  const std::vector<double>& params, bool range) {
  if (auto s = rho_list("rho", a.rho); !s) return fail(kUsageError, s.error().message);
  if (auto s = range ? side_list(param_name, params) : positive_list(param_name, params); !s)
    return fail(kUsageError, s.error().message);
  auto data = locations(a, context.projection, context.fleet_users, context.job);
  if (!data) return fail(kDataError, data.error().message);
  note_data(data->users(), data->dimension);
  if (auto s = load_centres(a, *data, context.projection, context.common); !s)
    return fail(kDataError, s.error().message);
  return report(a, data->description,
                range ? run_range(*data, a.rho, params, context.common)
                      : run_kde(*data, a.rho, params, context.common));
}

int run_range_experiment(const Arguments& a, Context& context) {
  return run_locations(a, context, "w", a.w, true);
}

int run_kde_experiment(const Arguments& a, Context& context) {
  return run_locations(a, context, "b", a.b, false);
}

int run_knn_experiment(const Arguments& a, Context& context) {
  if (auto s = rho_list("rho", a.rho); !s) return fail(kUsageError, s.error().message);
  if (auto s = count_list("k", a.k); !s) return fail(kUsageError, s.error().message);
  Dataset data, query_set;
  const Dataset* queries = nullptr;
  if (context.remote()) {
    // The devices hold locations: the same rows as cgp-device-swarm serves.
    auto devices = locations(a, context.projection, context.fleet_users);
    if (!devices) return fail(kDataError, devices.error().message);
    data = std::move(*devices);
  } else if (context.job) {
    tools::MpiJob& job = *context.job;
    auto slice = load_slice(a, job, [&]() -> Expected<Dataset> {
      if (!a.data.empty()) return load_vectors(a.data, context.projection, a.columns);
      return default_vector_candidates();
    });
    if (!slice) return fail(kDataError, slice.error().message);
    data = std::move(*slice);
    if (a.data.empty()) {  // the test images, whole on every rank
      Status loaded;
      if (job.rank() == 0) {
        auto test = load_idx(kFashionMnistTest);
        if (test)
          query_set = std::move(*test);
        else
          loaded = test.error();
      }
      if (auto s = job.agree(std::move(loaded)); !s) return fail(kDataError, s.error().message);
      query_set = job.broadcast(std::move(query_set));
      queries = &query_set;
    }
  } else {
    auto loaded = source_vectors(source_of(a, context.projection), a.columns);
    if (!loaded) return fail(kDataError, loaded.error().message);
    data = std::move(loaded->candidates);
    if (loaded->queries) {
      query_set = std::move(*loaded->queries);
      queries = &query_set;
    }
  }
  for (std::size_t k : a.k)
    if (k >= data.users() || k + 1 >= data.users())  // k + 1 alone wraps at 2^64 − 1
      return fail(kUsageError, "--k must be below the number of candidates (" +
                                   std::to_string(data.users() - 1) + "), got " +
                                   std::to_string(k));
  note_data(data.users(), data.dimension);
  return report(a, data.description, run_knn(data, queries, a.rho, a.k, context.common));
}

int run_multi_range_experiment(const Arguments& a, Context& context) {
  if (auto s = rho_list("budget", {a.budget}); !s) return fail(kUsageError, s.error().message);
  if (auto s = count_list("m", a.m); !s) return fail(kUsageError, s.error().message);
  if (auto s = side_list("w", a.w); !s) return fail(kUsageError, s.error().message);
  if (a.w.size() != 1) return fail(kUsageError, "--w takes one value for multi-range");
  // Over --fleet the devices' own budgets are spent, and PrivSav is a share of them.
  if (context.remote() && a.budget != context.fleet_budget)
    return fail(kUsageError, "--budget must be the coordinator's device budget (" +
                                 format_number(context.fleet_budget) + ") over --fleet, got " +
                                 format_number(a.budget));
  auto data = locations(a, context.projection, context.fleet_users, context.job);
  if (!data) return fail(kDataError, data.error().message);
  note_data(data->users(), data->dimension);
  if (auto s = load_centres(a, *data, context.projection, context.common); !s)
    return fail(kDataError, s.error().message);
  std::string description = data->description;
  if (context.remote())
    description += "; the coordinator's adaptive allocation over its devices' budgets";
  if (a.multi_target > 0) {
    if (context.job || context.remote())
      return fail(kUsageError,
                  "multi-range --target runs in one process (not over --fleet or mpirun yet)");
    if (!(a.multi_target < 1))
      return fail(kUsageError, "--target must be in (0, 1), got " + format_number(a.multi_target));
    return report(a, description,
                  run_multi_range_to_accuracy(*data, a.budget, a.m, a.w[0], a.multi_target,
                                              a.accuracy, context.common));
  }
  return report(a, description, run_multi_range(*data, a.budget, a.m, a.w[0], context.common));
}

int run_accuracy_experiment(const Arguments& a, Context& context) {
  if (context.job) return fail(kUsageError, "accuracy runs in one process, not under mpirun (yet)");
  if (context.remote())
    return fail(kUsageError,
                "accuracy runs in process; --fleet needs the Analyst API's "
                "accuracy-first query (not yet)");
  if (auto s = side_list("w", {a.accuracy.width}); !s) return fail(kUsageError, s.error().message);
  auto data = locations(a, context.projection);
  if (!data) return fail(kDataError, data.error().message);
  note_data(data->users(), data->dimension);
  if (auto s = load_centres(a, *data, context.projection, context.common); !s)
    return fail(kDataError, s.error().message);
  auto rows = run_accuracy(*data, a.accuracy, context.common);
  if (!rows &&
      (rows.error().code == ErrorCode::out_of_range ||
       rows.error().code == ErrorCode::not_positive || rows.error().code == ErrorCode::not_finite))
    return fail(kUsageError, rows.error().message);
  return report(a, data->description, rows);
}

int run_top_regions_experiment(const Arguments& a, Context& context) {
  if (context.job)
    return fail(kUsageError, "top-regions runs in one process, not under mpirun (yet)");
  if (context.remote())
    return fail(kUsageError,
                "top-regions runs in process; over a coordinator use cgp-analyst "
                "top-regions");
  auto data = locations(a, context.projection);
  if (!data) return fail(kDataError, data.error().message);
  note_data(data->users(), data->dimension);
  if (auto s = load_centres(a, *data, context.projection, context.common); !s)
    return fail(kDataError, s.error().message);
  auto rows = run_top_regions(*data, a.top, context.common);
  if (!rows && rows.error().code != ErrorCode::invalid_argument)
    return fail(kUsageError, rows.error().message);
  return report(a, data->description, rows);
}

int run_threshold_experiment(const Arguments& a, Context& context) {
  if (auto s = rho_list("rho", a.rho); !s) return fail(kUsageError, s.error().message);
  for (double q : a.q)
    if (!(q > 0 && q < 1))
      return fail(kUsageError, "--q values must be in (0, 1), got " + format_number(q));
  if (context.remote() && a.curator.empty())
    return fail(kUsageError,
                "--curator: threshold over --fleet needs the device holding the count");
  double below = a.below;
  auto column = source_values(source_of(a, context.projection), a.column);
  if (!column) return fail(kDataError, column.error().message);
  std::vector<double> values = std::move(column->values);
  std::string description = std::move(column->description);
  if (a.data.empty() && std::isnan(below)) below = 10000;
  if (std::isnan(below)) {  // count nonzero rows: turn them into "≤ 0" after negation
    for (double& v : values) v = v != 0 ? 0.0 : 1.0;
    below = 0;
  }
  if (context.remote()) description += "; curator " + a.curator + " over --fleet";
  note_data(values.size(), 1);
  return report(a, description, run_threshold(values, below, a.q, a.rho, context.common));
}

int run_watch_experiment(const Arguments& a, Context& context) {
  if (context.job) return fail(kUsageError, "watch runs in one process, not under mpirun");
  if (context.remote())
    return fail(kUsageError,
                "watch runs in process; over a coordinator use cgp-analyst watch-start");
  auto rows = run_watch(a.watch);
  if (!rows) {
    const bool usage = rows.error().parameter != "trajectories";
    return fail(usage ? kUsageError : kDataError, rows.error().message);
  }
  if (g_quiet) return 0;
  const auto& f = a.watch.fence;
  std::printf(
      "# watch: site (%s, %s), radius %s m, false beyond %s m, threshold %s m, clamp "
      "[0, %s] m; quality: false-alert and miss rates <= %s; %s\n",
      format_number(f.site[0]).c_str(), format_number(f.site[1]).c_str(),
      format_number(f.radius).c_str(), format_number(f.radius + f.band).c_str(),
      format_number(f.threshold()).c_str(), format_number(f.clamp).c_str(),
      format_number(a.watch.quality).c_str(),
      a.watch.trajectories.empty() ? "built-in movers" : a.watch.trajectories.c_str());
  print_watch_table(stdout, *rows);
  if (!a.json.empty())
    if (auto s = write_watch_json(a.json, *rows); !s) return fail(kDataError, s.error().message);
  return 0;
}

int run_accounting_experiment(const Arguments& a, Context& context) {
  if (context.job) return fail(kUsageError, "accounting runs in one process, not under mpirun");
  if (context.remote()) return fail(kUsageError, "accounting is pure math: no --fleet");
  auto result = run_accounting(a.accounting);
  if (!result) return fail(kUsageError, result.error().message);
  if (g_quiet) return 0;
  print_accounting(stdout, a.accounting, *result);
  if (!a.json.empty())
    if (auto s = write_accounting_json(a.json, *result); !s)
      return fail(kDataError, s.error().message);
  if (!a.plot.empty())
    if (auto s = write_accounting_plot(a.plot, a.accounting, *result); !s)
      return fail(kDataError, s.error().message);
  return 0;
}

// The subcommands: each adds its own flags (besides the common ones) and runs.
struct Experiment {
  const char* name;
  const char* description;
  void (*flags)(CLI::App&, Arguments&);
  int (*run)(const Arguments&, Context&);
};

const Experiment kExperiments[] = {
    {"range", "private range counting (Alg. 6)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--rho", a.rho, "each user's charge per query (list)")
           ->delimiter(',')
           ->required();
       sub.add_option("--w", a.w, "square side in metres (list)")->delimiter(',')->required();
     },
     run_range_experiment},
    {"kde", "private Gaussian KDE (Alg. 7)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--rho", a.rho, "each user's charge per query (list)")
           ->delimiter(',')
           ->required();
       sub.add_option("--b", a.b, "bandwidth in metres (list)")->delimiter(',')->required();
     },
     run_kde_experiment},
    {"knn", "private k nearest neighbours (Alg. 8)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--rho", a.rho, "each user's charge per query (list)")
           ->delimiter(',')
           ->required();
       sub.add_option("--k", a.k, "neighbours (list)")->delimiter(',')->required();
       sub.add_option("--columns", a.columns,
                      "the CSV columns that form each vector (default: every named numeric "
                      "column; a lon,lat file is projected locations)")
           ->delimiter(',');
     },
     run_knn_experiment},
    {"multi-range", "m range counts with adaptive budgeting (Alg. 3)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--budget", a.budget, "each user's total budget B")->required();
       sub.add_option("--m", a.m, "number of queries (list), each 1..1000000")
           ->delimiter(',')
           ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
           ->required();
       sub.add_option("--w", a.w, "square side in metres")->required();
       sub.add_option("--target", a.multi_target,
                      "accuracy-first: certify each query within this share (AF vs PM1)");
       sub.add_option("--growth", a.accuracy.growths, "with --target: per-round growth g > 1")
           ->delimiter(',');
       sub.add_option("--max-rounds", a.accuracy.max_rounds, "with --target: rounds at most")
           ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
     },
     run_multi_range_experiment},
    {"accuracy", "accuracy-first range counts: certify a target, pay only for it",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--target", a.accuracy.targets, "relative targets in (0, 1) (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--growth", a.accuracy.growths, "per-round growth g > 1 (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--cap", a.accuracy.cap, "each user's most charge per query")
           ->capture_default_str();
       sub.add_option("--w", a.accuracy.width, "square side in metres")->capture_default_str();
       sub.add_option("--absolute", a.accuracy.absolute,
                      "or certify within this many users (with --b: this much density)");
       sub.add_option("--b", a.accuracy.bandwidth,
                      "Gaussian KDE with this bandwidth (metres) instead of range counts");
       sub.add_option("--max-rounds", a.accuracy.max_rounds, "rounds at most (the union bound)")
           ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
           ->capture_default_str();
     },
     run_accuracy_experiment},
    {"top-regions", "the k busiest cells of a grid: a race of cells and users",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--k", a.top.ks, "regions (list)")->delimiter(',')->capture_default_str();
       sub.add_option("--growth", a.top.growths, "per-round growth g > 1 (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--cap", a.top.cap, "each user's most charge per query")
           ->capture_default_str();
       sub.add_option("--cell", a.top.cell, "cell side in metres")->capture_default_str();
       sub.add_option("--columns", a.top.columns, "grid columns")
           ->check(CLI::Range(std::size_t{1}, std::size_t{100}))
           ->capture_default_str();
       sub.add_option("--rows", a.top.rows, "grid rows")
           ->check(CLI::Range(std::size_t{1}, std::size_t{100}))
           ->capture_default_str();
       sub.add_option("--max-rounds", a.top.max_rounds, "rounds at most (the union bound)")
           ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
           ->capture_default_str();
     },
     run_top_regions_experiment},
    {"threshold", "private threshold query, central model (Alg. 9)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--column", a.column, "numeric column of --data")->required();
       sub.add_option("--below", a.below, "count rows with value <= this (default: nonzero rows)");
       sub.add_option("--q", a.q, "fractions q in (0, 1) (list)")->delimiter(',')->required();
       sub.add_option("--rho", a.rho, "the curator's charge per query (list)")
           ->delimiter(',')
           ->required();
       sub.add_option("--curator", a.curator,
                      "with --fleet: the id of the device that holds the count");
     },
     run_threshold_experiment},
    {"watch", "geofence alerts over moving users: Laplace watch vs Gaussian ex-post vs releases",
     [](CLI::App& sub, Arguments& a) {
       auto& w = a.watch;
       sub.add_option("--ticks", w.horizons, "horizons in ticks (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--methods", w.methods, "laplace,gaussian_expost,gaussian_releases (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--radius", w.fence.radius, "alert within this many metres of the site")
           ->capture_default_str();
       sub.add_option("--band", w.fence.band,
                      "an alert farther than radius + band is false (metres)")
           ->capture_default_str();
       sub.add_option("--clamp", w.fence.clamp, "distances are clamped to [0, clamp] metres")
           ->capture_default_str();
       sub.add_option("--site", w.fence.site, "X,Y of the site (metres)")->delimiter(',');
       sub.add_option("--quality", w.quality,
                      "the false-alert and miss rates to reach, each at most this")
           ->capture_default_str();
       sub.add_option("--users", w.users, "built-in movers: how many")->capture_default_str();
       sub.add_option("--step", w.step, "built-in movers: metres per tick")->capture_default_str();
       sub.add_option("--trajectories", w.trajectories, "CSV of id,t,x,y (metres, t = tick)");
       sub.add_option("--seed", w.seed, "run seed")->capture_default_str();
       sub.add_option("--json", a.json, "write the rows as JSON");
     },
     run_watch_experiment},
    {"accounting",
     "privacy profiles of private selection: RDP bound, Thm 5.2, exact (002 Fig. 2/3)",
     [](CLI::App& sub, Arguments& a) {
       auto& s = a.accounting;
       sub.add_option("--m", s.ms, "expected numbers of runs (list)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("--eta", s.eta, "truncated negative binomial eta (1: geometric)")
           ->capture_default_str();
       sub.add_option("--sigma", s.sigma, "the base Gaussian mechanism's noise (sensitivity 1)")
           ->capture_default_str();
       sub.add_option("--delta", s.delta, "delta of the epsilon table")->capture_default_str();
       sub.add_option("--epsilons", s.epsilons, "epsilons of the delta(epsilon) curves (list)")
           ->delimiter(',');
       sub.add_option("--json", a.json, "write the rows and curves as JSON");
       sub.add_option("--plot", a.plot, "write OUT.png and OUT.svg");
     },
     run_accounting_experiment},
};

void add_common_options(CLI::App& sub, Arguments& a) {
  sub.add_option("--data", a.data, "CSV (lon,lat | x,y | numeric columns) or IDX file");
  sub.add_option("--methods", a.methods, "BM0,BM1,PM0,PM1")->delimiter(',');
  sub.add_option("--c", a.c, "rounds of iterative elimination (list)")->delimiter(',');
  sub.add_option("--split", a.split, "even|double (list)")->delimiter(',');
  sub.add_option("--reps", a.reps, "repetitions per row");
  sub.add_option("--beta", a.beta, "failure probability (beta0 = beta/4)");
  sub.add_option("--seed", a.seed, "run seed");
  sub.add_option("--threads", a.threads, "threads (0 = all cores)");
  sub.add_option("--projection", a.projection, "local|mercator, for lon/lat data");
  sub.add_option("--noise", a.noise,
                 "fast (counter-based normals on the device's grid) | exact (the device's own "
                 "sampler); in-process only")
      ->capture_default_str();
  sub.add_option("--json", a.json,
                 "write the rows as JSON (rewritten as each row finishes; each row records the "
                 "run: seed, data and its SHA-256, n, d, projection, beta, noise, version, "
                 "commit)");
  sub.add_option("--per-rep", a.per_rep, "write one JSON row per repetition");
  sub.add_option("--plot", a.plot, "write OUT.png and OUT.svg");
  sub.add_flag("--no-shift", a.no_shift, "BM1/PM1 ranges without the Appendix B shift");
  sub.add_option("--queries", a.queries, "CSV of query centres (x,y or lon,lat)");
  sub.add_option("--n", a.n, "sample N users from the data, with replacement");
  sub.add_option("--fleet", a.fleet,
                 "HOST:PORT of a live coordinator: its devices hold rows 0..N-1 of the data, as "
                 "cgp-device-swarm serves them");
  sub.add_option("--analyst-credential", a.analyst_credential,
                 "with --fleet: file holding the analyst credential");
  sub.add_option("--tls-root", a.tls_root, "with --fleet: PEM root certificate");
}

int run(int argc, char** argv, tools::MpiJob* job);

}  // namespace

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // Repetitions free and allocate arrays of the fleet's size (estimates, reports, lists): glibc
  // would hand blocks over 128 KiB back to the kernel and fault in zeroed pages for the next rep
  // (measured: ~25% of a 2-D kNN PM1 run on 200,000 users). Keep freed memory for reuse, and
  // map only blocks over 256 MiB (10^8-user arrays) on their own.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  // Under mpirun every rank runs the same experiment on its slice of the users; MPI is started
  // only when a launcher started this process.
  std::unique_ptr<tools::MpiJob> job;
  if (tools::launched_by_mpi()) {
    auto started = tools::MpiJob::start(&argc, &argv);
    if (!started) return fail(kUsageError, started.error().message);
    job = std::move(*started);
    g_quiet = job->rank() != 0;
  }
  const int code = tools::guarded_main("cgp-sim", [&] { return run(argc, argv, job.get()); });
  if (job && job->rank() == 0 && code == 0)
    std::fprintf(stderr,
                 "cgp-sim: %zu ranks; rank 0 put %llu bytes into %llu reductions of the engine\n",
                 job->size(), static_cast<unsigned long long>(job->bytes_reduced()),
                 static_cast<unsigned long long>(job->reductions()));
  return code;
}

namespace {

int run(int argc, char** argv, tools::MpiJob* job) {
  CLI::App app{
      "cgp-sim: the experiments of Liang & Yi, Adaptive Privacy Budgeting (§7, App. C), "
      "over simulated devices that privatize on their own side"};
  tools::add_common_flags(app, /*config_file=*/false);
  app.require_subcommand(1);
  Arguments a;
  const auto experiments = tools::add_commands(app, std::span<const Experiment>(kExperiments), a);
  for (const auto& [sub, experiment] : experiments)
    if (std::string_view(experiment->name) != "watch" &&
        std::string_view(experiment->name) != "accounting")
      add_common_options(*sub, a);
  if (auto done = tools::parse_command_line(app, argc, argv, "cgp-sim")) return *done;

  Context context;
  context.job = job;
  if (job) {
    context.common.ranks = &job->reducer();
    if (!a.fleet.empty()) return fail(kUsageError, "--fleet runs in one process, not under mpirun");
  }
  auto common = common_from(a, job ? job->size() : 1);
  if (!common) return fail(kUsageError, common.error().message);
  // Only rank 0 writes outputs, so only it probes their paths (ranks probing one path at once
  // race: one creates and removes it under another); the ranks then agree on the verdict.
  Status outputs = g_quiet ? Status{} : check_outputs(a);
  if (job) outputs = job->agree(std::move(outputs));
  if (!outputs) return fail(kUsageError, outputs.error().message);
  g_run.seed = a.seed;
  g_run.data = a.data.empty() ? "built-in" : a.data;
  // The file's digest, so that a row says exactly which data it was made from.
  if (!a.data.empty()) g_run.data_sha256 = data_sha256(a.data);
  g_run.projection = a.projection;
  g_run.beta = a.beta;
  g_run.noise = a.fleet.empty() ? a.noise : "device";
  g_run.version = std::string(version_string());
  g_run.commit = CGP_GIT_COMMIT;
  const auto ranks = context.common.ranks;
  context.common = std::move(*common);
  context.common.ranks = ranks;
  // Rows reach --json as they finish: an interrupted run keeps what it did.
  std::vector<Row> finished;
  if (!a.json.empty() && !g_quiet)
    context.common.on_row = [&](const Row& row) {
      finished.push_back(row);
      if (auto s = write_json(a.json, finished, g_run); !s)
        std::fprintf(stderr, "cgp-sim: %s\n", s.error().message.c_str());
    };
  auto projection = geometry::parse_projection_kind(a.projection);
  if (!projection)
    return fail(kUsageError, "--projection must be local or mercator, got '" + a.projection + "'");
  context.projection = *projection;

  std::unique_ptr<RemoteBackend> remote;
  if (!a.fleet.empty()) {
    if (a.n) return fail(kUsageError, "--n cannot be used with --fleet: the devices hold the data");
    auto client = connect_fleet(a);
    if (!client) return fail(kDataError, client.error().message);
    auto status = client->status();
    if (!status) return fail(kDataError, "--fleet: " + status.error().message);
    if (status->connected < status->enrolled)
      std::fprintf(stderr,
                   "cgp-sim: %zu of %zu devices are connected; the others count as "
                   "unanswered\n",
                   status->connected, status->enrolled);
    remote = std::make_unique<RemoteBackend>(std::move(*client), status->enrolled, a.curator);
    context.common.fleet = remote.get();
    context.fleet_users = status->enrolled;
    context.fleet_budget = status->device_budget;
  } else if (!a.curator.empty()) {
    return fail(kUsageError, "--curator needs --fleet");
  }

  if (const Experiment* experiment = tools::parsed_command(experiments))
    return experiment->run(a, context);
  return fail(kUsageError, "no experiment given");
}

}  // namespace

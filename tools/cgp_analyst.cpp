// cgp-analyst: submit queries to a cgpkit coordinator service and read results, as JSON.
//
//   cgp-analyst --coordinator HOST:PORT --credential FILE [--tls-root PEM] COMMAND ...
//     status    [--wait-connected N [--timeout SECONDS]]
//     range     (--box X0,Y0,X1,Y1 | --disc X,Y,R)  [query options]
//     kde       --point X,Y,... --b BANDWIDTH         [query options]
//     knn       --point X,Y,... --k K                 [query options]
//     threshold --device ID --q Q --population N      [query options]
//     top-regions --grid X0,Y0,CELL,COLUMNS,ROWS --k K  [query options] [--max-rounds C]
//                                                     [--growth G]
//     result    --id QUERY_ID
//     watch-start --id WATCH_ID (--point X,Y,... | --box X0,Y0,X1,Y1) --threshold R
//               --epsilon E --horizon T --tick-seconds S [--clamp LO,HI] [--leave]
//               [--component NAME] [--users I,J,...]
//     watch     --id WATCH_ID
//   query options: --rho R (0 = the coordinator's adaptive allocation) --method BM0|BM1|PM0|PM1
//                  --c ROUNDS --split even|double --beta B --no-shift --id QUERY_ID --per-user
//   accuracy-first (range, kde): --target A [--absolute K] --max-rho R [--max-rounds C]
//                  [--growth G]: certify the answer within max(A·answer, K), each user charged
//                  at most R (--max-rho is --rho), stopping as soon as it is certified
//
// Exit 0 with the JSON result on stdout; 1 when the coordinator refuses or fails (the error
// names the parameter); 2 on bad arguments or values; 3 on a missing or unreadable file.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/files.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/version.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-analyst: %s\n", message.c_str());
  return code;
}

nlohmann::json to_json(const cgp::analyst::RemoteResult& r, const std::string& kind,
                       bool per_user) {
  nlohmann::json out;
  out["query_id"] = r.query_id;
  if (kind == "range" || kind == "kde") out["estimate"] = r.estimate;
  if (r.certified) {
    out["lower"] = r.lower;
    out["upper"] = r.upper;
    out["certified"] = *r.certified;
  }
  if (kind == "knn") out["neighbours"] = r.neighbour_ids;
  if (kind == "threshold") out["below"] = r.below;
  if (!r.region_counts.empty()) {
    out["top_regions"] = r.top_regions;
    nlohmann::json counts = nlohmann::json::array();
    for (const auto& c : r.region_counts)
      counts.push_back(
          {{"region", c.region}, {"estimate", c.estimate}, {"lower", c.lower}, {"upper", c.upper}});
    out["region_counts"] = counts;
  }
  out["rounds_used"] = r.report.rounds_used;
  out["asked_per_round"] = r.report.asked_per_round;
  out["eliminated_per_round"] = r.report.eliminated_per_round;
  double total = 0, most = 0;
  std::size_t charged = 0;
  for (double c : cgp::coordinator::charge_values(r.report.charged)) {
    total += c;
    most = std::max(most, c);
    charged += c > 0 ? 1 : 0;
  }
  out["users_charged"] = charged;
  out["total_charged_rho"] = total;
  out["max_charged_rho"] = most;
  if (per_user) out["charged"] = cgp::coordinator::charge_values(r.report.charged);
  out["refused"] = r.report.refused;
  out["rejected"] = r.report.rejected;
  out["unanswered"] = r.report.unanswered;
  out["not_reached"] = r.report.not_reached;
  out["seconds"] = r.seconds;
  out["coverage"] = {{"users", r.coverage.users},
                     {"answered", r.coverage.answered},
                     {"refused", r.coverage.refused},
                     {"rejected", r.coverage.rejected},
                     {"unanswered", r.coverage.unanswered},
                     {"min_coverage", r.coverage.min_coverage},
                     {"valid", r.coverage.valid}};
  out["missing"] = {{"users", r.missing.users},         {"lower", r.missing.lower},
                    {"upper", r.missing.upper},         {"share", r.missing.share},
                    {"max_share", r.missing.max_share}, {"valid", r.missing.valid}};
  return out;
}

// Everything the command line can say; each command reads what it declared.
struct Arguments {
  std::string coordinator, credential_file, tls_root_file;
  std::optional<double> min_coverage, max_missing_share;
  double rho = 0, beta = 0.1, bandwidth = 0, q = 0, population = 0;
  std::string method = "PM1", split = "even", id, device;
  std::size_t rounds = 4, k = 0;
  bool no_shift = false, per_user = false;
  std::vector<double> box, disc, point, grid;
  std::size_t wait_connected = 0;
  double timeout = 60;
  // Accuracy-first: set when --target or --absolute is given.
  double target = 0, absolute = 0, growth = 2;
  std::size_t max_rounds = 16;
  // Watches.
  double threshold = 0, epsilon = 0, tick_seconds = 0;
  std::uint64_t horizon = 0;
  std::vector<double> clamp;
  std::vector<std::uint32_t> users;
  std::string component = "location";
  bool leave = false;
  bool accuracy_first() const noexcept { return target > 0 || absolute > 0; }
  cgp::analyst::RemoteAccuracy accuracy() const {
    return {{target, absolute}, max_rounds, growth, 0};
  }
};

void add_accuracy_options(CLI::App& sub, Arguments& a) {
  sub.add_option("--target", a.target,
                 "accuracy-first: certify the answer within this share of it, in (0, 1)")
      ->check(cgp::tools::finite_in(0.0, 1.0, true, true));
  sub.add_option("--absolute", a.absolute,
                 "accuracy-first: or within this much (users; density for kde)")
      ->check(cgp::tools::finite_in(0.0, 1e300, true));
  sub.add_option("--max-rounds", a.max_rounds, "accuracy-first: rounds at most")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  sub.add_option("--growth", a.growth, "accuracy-first: each round asks g times the last, g > 1")
      ->check(cgp::tools::finite_in(1.0, 1e6, true))
      ->capture_default_str();
}

void add_query_options(CLI::App& sub, Arguments& a) {
  sub.add_option("--rho,--max-rho", a.rho, "each user's charge (rho per m^2); 0 = adaptive")
      ->check(cgp::tools::finite_in(0.0, 1e300))
      ->capture_default_str();
  sub.add_option("--method", a.method, "BM0|BM1|PM0|PM1")->capture_default_str();
  sub.add_option("--c", a.rounds, "rounds of iterative elimination")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  sub.add_option("--split", a.split, "even|double")->capture_default_str();
  sub.add_option("--beta", a.beta, "failure probability, in (0, 1)")
      ->check(cgp::tools::finite_in(0.0, 1.0, true, true))
      ->capture_default_str();
  sub.add_flag("--no-shift", a.no_shift, "BM1/PM1 ranges without the Appendix B shift");
  sub.add_option("--id", a.id, "query id (unique; default: the coordinator's)");
  sub.add_flag("--per-user", a.per_user, "print every user's charge");
}

// A query command's options as the client takes them; exit code 2 and a message when bad.
struct Query {
  cgp::coordinator::QueryOptions options;
  cgp::analyst::RemoteCharges charges;
};
std::optional<Query> query_from(const Arguments& a, int& failed) {
  Query out;
  auto method = cgp::coordinator::parse_method(a.method);
  if (!method) {
    failed = fail(2, "--method: " + method.error().message);
    return std::nullopt;
  }
  auto split = cgp::privacy::parse_split_schedule(a.split);
  if (!split) {
    failed = fail(2, "--split: " + split.error().message);
    return std::nullopt;
  }
  out.options.method = *method;
  out.options.split = *split;
  out.options.rounds = a.rounds;
  out.options.beta = a.beta;
  out.options.shift = !a.no_shift;
  out.options.query_id = a.id;
  out.charges = a.rho > 0 ? cgp::analyst::RemoteCharges::fixed(cgp::coordinator::Charge{a.rho})
                          : cgp::analyst::RemoteCharges::adaptive();
  return out;
}

int print_result(const cgp::Expected<cgp::analyst::RemoteResult>& answer, const std::string& kind,
                 bool per_user) {
  if (!answer) return fail(1, answer.error().message);
  std::printf("%s\n", to_json(*answer, kind, per_user).dump(2).c_str());
  return 0;
}

// Runs a query command: `ask(client, query)` sends it.
template <class Ask>
int run_query(const Arguments& a, cgp::analyst::AnalystClient& client, const char* kind,
              Ask&& ask) {
  int failed = 0;
  auto query = query_from(a, failed);
  if (!query) return failed;
  return print_result(ask(client, *query), kind, a.per_user);
}

int run_status(const Arguments& a, const cgp::analyst::AnalystConnection& connection,
               cgp::analyst::AnalystClient& client) {
  // Waiting polls with short calls on fresh connections, so that a coordinator that is still
  // starting (or a connection attempt that stalls) costs at most a second per poll.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.timeout);
  auto poll = [&] {
    auto probe_connection = connection;
    probe_connection.timeout = std::chrono::seconds(1);
    auto probe = cgp::analyst::AnalystClient::connect(probe_connection);
    return probe ? probe->status() : cgp::Expected<cgp::analyst::RemoteStatus>(probe.error());
  };
  auto s = a.wait_connected > 0 ? poll() : client.status();
  // A refused credential is final; an unreachable coordinator is waited for.
  while ((s ? s->connected < a.wait_connected : s.error().parameter == "coordinator") &&
         a.wait_connected > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = poll();
  }
  if (!s) return fail(1, s.error().message);
  if (s->connected < a.wait_connected)
    return fail(1, "--wait-connected: " + std::to_string(s->connected) + " of " +
                       std::to_string(a.wait_connected) + " devices connected after " +
                       cgp::format_number(a.timeout) + " s");
  nlohmann::json out{{"enrolled", s->enrolled},
                     {"connected", s->connected},
                     {"dimension", s->dimension},
                     {"device_budget", s->device_budget},
                     {"queries", s->queries},
                     {"rounds", s->rounds},
                     {"requests", s->requests},
                     {"replies", s->replies},
                     {"unanswered", s->unanswered},
                     {"late_replies", s->late_replies},
                     {"refused_connections", s->refused_connections}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int run_range(const Arguments& a, cgp::analyst::AnalystClient& client) {
  std::optional<cgp::geometry::Region> region;
  if (!a.box.empty() == !a.disc.empty()) return fail(2, "range needs one of --box or --disc");
  if (!a.box.empty()) {
    const double lo[2] = {a.box[0], a.box[1]}, hi[2] = {a.box[2], a.box[3]};
    auto made = cgp::geometry::Box::create(lo, hi);
    if (!made) return fail(2, "--box: " + made.error().message);
    region = *made;
  } else {
    const double centre[2] = {a.disc[0], a.disc[1]};
    auto made = cgp::geometry::Ball::create(centre, a.disc[2]);
    if (!made) return fail(2, "--disc: " + made.error().message);
    region = *made;
  }
  return run_query(a, client, "range", [&](auto& c, const Query& q) {
    return a.accuracy_first() ? c.range_count(*region, q.charges, a.accuracy(), q.options)
                              : c.range_count(*region, q.charges, q.options);
  });
}

nlohmann::json to_json(const cgp::analyst::RemoteWatch& w) {
  using State = cgp::analyst::RemoteDeviceWatch::State;
  static constexpr const char* kStates[] = {"pending", "armed", "refused", "rejected"};
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : w.devices) {
    nlohmann::json device{{"device_id", d.device_id},
                          {"user", d.user},
                          {"state", kStates[static_cast<int>(d.state)]}};
    if (d.state == State::rejected) device["error"] = d.error.message;
    if (d.alert_tick != 0) {
      device["alert_tick"] = d.alert_tick;
      device["alert_received_unix_seconds"] = d.alert_received_unix_seconds;
    }
    devices.push_back(std::move(device));
  }
  nlohmann::json out{{"watch_id", w.watch_id}, {"pending", w.pending},   {"armed", w.armed},
                     {"refused", w.refused},   {"rejected", w.rejected}, {"alerts", w.alerts},
                     {"devices", devices}};
  if (w.spec) {
    const auto& p = w.spec->params();
    out["horizon"] = p.horizon;
    out["tick_seconds"] = p.tick_seconds;
    out["start_unix_seconds"] = p.start_unix_seconds;
    out["epsilon"] = p.epsilon;
    out["charged_rho"] = cgp::laplace_watch_charge(p.epsilon);
  }
  return out;
}

int print_watch(const cgp::Expected<cgp::analyst::RemoteWatch>& watch) {
  if (!watch) return fail(1, watch.error().message);
  std::printf("%s\n", to_json(*watch).dump(2).c_str());
  return 0;
}

int run_watch_start(const Arguments& a, cgp::analyst::AnalystClient& client) {
  cgp::WatchSpecParams p;
  p.watch_id = a.id;
  p.component_id = a.component;
  if (a.point.empty() == a.box.empty()) return fail(2, "watch-start needs one of --point or --box");
  if (!a.point.empty()) {
    p.statistic = cgp::StatisticKind::distance_to_point;
    p.point = a.point;
  } else {
    const double lo[2] = {a.box[0], a.box[1]}, hi[2] = {a.box[2], a.box[3]};
    auto made = cgp::geometry::Box::create(lo, hi);
    if (!made) return fail(2, "--box: " + made.error().message);
    p.statistic = cgp::StatisticKind::signed_distance_to_region;
    p.region = *made;
  }
  p.threshold = a.threshold;
  // Default clamp: scores beyond four thresholds (or 1 km) say nothing more about an alert.
  const double reach = std::max(4 * std::fabs(a.threshold), 1000.0);
  p.clamp_lo = a.clamp.empty() ? (p.point.empty() ? -reach : 0.0) : a.clamp[0];
  p.clamp_hi = a.clamp.empty() ? reach : a.clamp[1];
  p.trigger = a.leave ? cgp::WatchTrigger::at_or_above : cgp::WatchTrigger::at_or_below;
  p.horizon = a.horizon;
  p.epsilon = a.epsilon;
  p.tick_seconds = a.tick_seconds;
  auto spec = cgp::WatchSpec::create(std::move(p));
  if (!spec) return fail(2, "--" + spec.error().parameter + ": " + spec.error().message);
  std::vector<cgp::coordinator::UserId> users(a.users.begin(), a.users.end());
  return print_watch(client.start_watch(*spec, users));
}

// The commands: each declares its flags and runs with a connected client.
struct Command {
  const char* name;
  const char* description;
  void (*flags)(CLI::App&, Arguments&);
  int (*run)(const Arguments&, const cgp::analyst::AnalystConnection&,
             cgp::analyst::AnalystClient&);
};

const Command kCommands[] = {
    {"status", "the coordinator's counters",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--wait-connected", a.wait_connected,
                      "first wait until this many devices are connected")
           ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 32));
       sub.add_option("--timeout", a.timeout, "seconds to wait at most (exit 1 after)")
           ->check(cgp::tools::finite_in(0.0, 86400.0 * 365))
           ->capture_default_str();
     },
     run_status},
    {"range", "private range count",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--box", a.box, "X0,Y0,X1,Y1")->delimiter(',')->expected(4);
       sub.add_option("--disc", a.disc, "X,Y,R")->delimiter(',')->expected(3);
       add_query_options(sub, a);
       add_accuracy_options(sub, a);
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) { return run_range(a, client); }},
    {"kde", "private Gaussian KDE",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--point", a.point, "X,Y,...")->delimiter(',')->required();
       sub.add_option("--b", a.bandwidth, "bandwidth, metres")->required();
       add_query_options(sub, a);
       add_accuracy_options(sub, a);
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) {
       return run_query(a, client, "kde", [&](auto& c, const Query& q) {
         return a.accuracy_first() ? c.kde(a.point, a.bandwidth, q.charges, a.accuracy(), q.options)
                                   : c.kde(a.point, a.bandwidth, q.charges, q.options);
       });
     }},
    {"knn", "private k nearest neighbours",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--point", a.point, "X,Y,...")->delimiter(',')->required();
       sub.add_option("--k", a.k, "neighbours")
           ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
           ->required();
       add_query_options(sub, a);
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) {
       return run_query(a, client, "knn", [&](auto& c, const Query& q) {
         return c.knn(a.point, a.k, q.charges, q.options);
       });
     }},
    {"threshold", "is a curator's count below q·N?",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--device", a.device, "the curator's device id")->required();
       sub.add_option("--q", a.q, "fraction q")->required();
       sub.add_option("--population", a.population, "N")->required();
       add_query_options(sub, a);
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) {
       return run_query(a, client, "threshold", [&](auto& c, const Query& q) {
         return c.threshold(a.device, a.q, a.population, q.charges, q.options);
       });
     }},
    {"top-regions", "the k busiest cells of a grid",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--grid", a.grid, "X0,Y0,CELL,COLUMNS,ROWS")
           ->delimiter(',')
           ->expected(5)
           ->required();
       sub.add_option("--k", a.k, "regions")
           ->check(CLI::Range(std::size_t{1}, std::size_t{10000}))
           ->required();
       add_query_options(sub, a);
       sub.add_option("--max-rounds", a.max_rounds, "rounds at most")
           ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
           ->capture_default_str();
       sub.add_option("--growth", a.growth, "each round asks g times the last, g > 1")
           ->capture_default_str();
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) {
       const auto count = [](double v) {
         return v >= 1 && v <= 10000 && v == std::floor(v) ? static_cast<std::size_t>(v) : 0;
       };
       if (count(a.grid[3]) == 0 || count(a.grid[4]) == 0)
         return fail(2, "--grid: COLUMNS and ROWS must be whole numbers in 1..10000");
       auto cells = cgp::coordinator::grid_regions(a.grid[0], a.grid[1], a.grid[2],
                                                   count(a.grid[3]), count(a.grid[4]));
       if (!cells) return fail(2, "--grid: " + cells.error().message);
       return run_query(a, client, "top-regions", [&](auto& c, const Query& q) {
         return c.top_regions(*cells, a.k, q.charges, a.accuracy(), q.options);
       });
     }},
    {"result", "a finished query's result",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--id", a.id, "query id")->required();
       sub.add_flag("--per-user", a.per_user, "print every user's charge");
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) {
       auto answer = client.result(a.id);
       return print_result(answer, answer && !answer->neighbour_ids.empty() ? "knn" : "range",
                           a.per_user);
     }},
    {"watch-start", "a geofence watch on the devices (one alert each at most)",
     [](CLI::App& sub, Arguments& a) {
       sub.add_option("--id", a.id, "watch id (unique on this coordinator)")->required();
       sub.add_option("--point", a.point, "X,Y,...: score = distance to this point")
           ->delimiter(',');
       sub.add_option("--box", a.box, "X0,Y0,X1,Y1: score = signed distance to this box")
           ->delimiter(',')
           ->expected(4);
       sub.add_option("--threshold", a.threshold, "alert when the score is at or below this")
           ->required();
       sub.add_option("--clamp", a.clamp, "LO,HI: the public score range (default: 4 thresholds)")
           ->delimiter(',')
           ->expected(2);
       sub.add_flag("--leave", a.leave, "alert when the score is at or above the threshold");
       sub.add_option("--epsilon", a.epsilon, "epsilon per unit distance for the whole watch")
           ->required();
       sub.add_option("--horizon", a.horizon, "ticks")->required();
       sub.add_option("--tick-seconds", a.tick_seconds, "seconds between ticks, from now")
           ->required();
       sub.add_option("--component", a.component, "the device component scored")
           ->capture_default_str();
       sub.add_option("--users", a.users, "user indices (default: every enrolled user)")
           ->delimiter(',');
     },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) { return run_watch_start(a, client); }},
    {"watch", "a watch's state: who armed it, who alerted at which tick",
     [](CLI::App& sub, Arguments& a) { sub.add_option("--id", a.id, "watch id")->required(); },
     [](const Arguments& a, const cgp::analyst::AnalystConnection&,
        cgp::analyst::AnalystClient& client) { return print_watch(client.watch(a.id)); }},
};

int run(int argc, char** argv) {
  CLI::App app{"cgp-analyst: queries to a cgpkit coordinator"};
  cgp::tools::add_common_flags(app, /*config_file=*/false);
  app.require_subcommand(1);
  Arguments a;
  app.add_option("--coordinator", a.coordinator, "HOST:PORT")->required();
  app.add_option("--credential", a.credential_file, "file holding the analyst credential");
  app.add_option("--tls-root", a.tls_root_file, "PEM root certificate of the coordinator");
  app.add_option("--min-coverage", a.min_coverage,
                 "share of a query's users that must answer, 0..1 (default: the coordinator's, "
                 "0.9); below it the query fails and cgp-analyst exits 1")
      ->check(cgp::tools::finite_in(0.0, 1.0));
  app.add_option("--max-missing-share", a.max_missing_share,
                 "how much of an answer the users who did not answer may be, 0..1 (default: the "
                 "coordinator's, 0.1): the answer lies in [missing.lower, missing.upper] as far as "
                 "they go; above it the query fails and cgp-analyst exits 1")
      ->check(cgp::tools::finite_in(0.0, 1.0));
  const auto commands = cgp::tools::add_commands(app, std::span<const Command>(kCommands), a);
  if (auto done = cgp::tools::parse_command_line(app, argc, argv, "cgp-analyst")) return *done;

  cgp::analyst::AnalystConnection connection;
  connection.coordinator_address = a.coordinator;
  connection.min_coverage = a.min_coverage;
  connection.max_missing_share = a.max_missing_share;
  if (auto unreadable =
          cgp::tools::read_client_files(a.credential_file, a.tls_root_file, connection.credential,
                                        connection.tls_root_certificate))
    return fail(3, unreadable->message);
  auto client = cgp::analyst::AnalystClient::connect(connection);
  if (!client) return fail(2, client.error().message);
  if (const Command* command = cgp::tools::parsed_command(commands))
    return command->run(a, connection, *client);
  return fail(2, "no command given");
}

}  // namespace

int main(int argc, char** argv) {
  cgp::protocol::turn_off_lock_order_graph();
  return cgp::tools::guarded_main("cgp-analyst", [&] { return run(argc, argv); });
}

// cgp-analyst: submit queries to a cgpkit coordinator service and read results, as JSON.
//
//   cgp-analyst --coordinator HOST:PORT --credential FILE [--tls-root PEM] COMMAND ...
//     status    [--wait-connected N [--timeout SECONDS]]
//     range     (--box X0,Y0,X1,Y1 | --disc X,Y,R)  [query options]
//     kde       --point X,Y,... --b BANDWIDTH         [query options]
//     knn       --point X,Y,... --k K                 [query options]
//     threshold --device ID --q Q --population N      [query options]
//     result    --id QUERY_ID
//   query options: --rho R (0 = the coordinator's adaptive allocation) --method BM0|BM1|PM0|PM1
//                  --c ROUNDS --split even|double --beta B --no-shift --id QUERY_ID --per-user
//
// Exit 0 with the JSON result on stdout; 1 when the coordinator refuses or fails (the error
// names the parameter); 2 on bad arguments or values; 3 on a missing or unreadable file.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "cgp/common/validate.hpp"
#include "cgp/common/version.hpp"
#include "cgp/transport/analyst_client.hpp"
#include "cgp/transport/files.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-analyst: %s\n", message.c_str());
  return code;
}

nlohmann::json to_json(const cgp::transport::RemoteResult& r, const std::string& kind,
                       bool per_user) {
  nlohmann::json out;
  out["query_id"] = r.query_id;
  if (kind == "range" || kind == "kde") out["estimate"] = r.estimate;
  if (kind == "knn") out["neighbours"] = r.neighbour_ids;
  if (kind == "threshold") out["below"] = r.below;
  out["rounds_used"] = r.report.rounds_used;
  out["asked_per_round"] = r.report.asked_per_round;
  out["eliminated_per_round"] = r.report.eliminated_per_round;
  double total = 0, most = 0;
  std::size_t charged = 0;
  for (double c : r.report.charged) {
    total += c;
    most = std::max(most, c);
    charged += c > 0 ? 1 : 0;
  }
  out["users_charged"] = charged;
  out["total_charged_rho"] = total;
  out["max_charged_rho"] = most;
  if (per_user) out["charged"] = r.report.charged;
  out["refused"] = r.report.refused;
  out["rejected"] = r.report.rejected;
  out["unanswered"] = r.report.unanswered;
  out["seconds"] = r.seconds;
  out["coverage"] = {{"users", r.coverage.users},
                     {"answered", r.coverage.answered},
                     {"refused", r.coverage.refused},
                     {"rejected", r.coverage.rejected},
                     {"unanswered", r.coverage.unanswered},
                     {"min_coverage", r.coverage.min_coverage},
                     {"valid", r.coverage.valid}};
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"cgp-analyst: queries to a cgpkit coordinator"};
  cgp::tools::add_common_flags(app, /*config_file=*/false);
  app.require_subcommand(1);
  std::string coordinator, credential_file, tls_root_file;
  std::optional<double> min_coverage;
  app.add_option("--coordinator", coordinator, "HOST:PORT")->required();
  app.add_option("--credential", credential_file, "file holding the analyst credential");
  app.add_option("--tls-root", tls_root_file, "PEM root certificate of the coordinator");
  app.add_option("--min-coverage", min_coverage,
                 "share of a query's users that must answer, 0..1 (default: the coordinator's, "
                 "0.9); below it the query fails and cgp-analyst exits 1")
      ->check(CLI::Range(0.0, 1.0));

  double rho = 0, beta = 0.1, bandwidth = 0, q = 0, population = 0;
  std::string method = "PM1", split = "even", id, device;
  std::size_t rounds = 4, k = 0;
  bool no_shift = false, per_user = false;
  std::vector<double> box, disc, point;
  auto add_query_options = [&](CLI::App* sub) {
    sub->add_option("--rho", rho, "each user's charge (rho per m^2); 0 = adaptive")
        ->check(CLI::Range(0.0, 1e300))
        ->capture_default_str();
    sub->add_option("--method", method, "BM0|BM1|PM0|PM1")->capture_default_str();
    sub->add_option("--c", rounds, "rounds of iterative elimination")
        ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
        ->capture_default_str();
    sub->add_option("--split", split, "even|double")->capture_default_str();
    sub->add_option("--beta", beta, "failure probability, in (0, 1)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    sub->add_flag("--no-shift", no_shift, "BM1/PM1 ranges without the Appendix B shift");
    sub->add_option("--id", id, "query id (unique; default: the coordinator's)");
    sub->add_flag("--per-user", per_user, "print every user's charge");
  };
  std::size_t wait_connected = 0;
  double timeout = 60;
  auto* status = app.add_subcommand("status", "the coordinator's counters");
  status
      ->add_option("--wait-connected", wait_connected,
                   "first wait until this many devices are connected")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 32));
  status->add_option("--timeout", timeout, "seconds to wait at most (exit 1 after)")
      ->check(CLI::Range(0.0, 86400.0 * 365))
      ->capture_default_str();
  auto* range = app.add_subcommand("range", "private range count");
  range->add_option("--box", box, "X0,Y0,X1,Y1")->delimiter(',')->expected(4);
  range->add_option("--disc", disc, "X,Y,R")->delimiter(',')->expected(3);
  add_query_options(range);
  auto* kde = app.add_subcommand("kde", "private Gaussian KDE");
  kde->add_option("--point", point, "X,Y,...")->delimiter(',')->required();
  kde->add_option("--b", bandwidth, "bandwidth, metres")->required();
  add_query_options(kde);
  auto* knn = app.add_subcommand("knn", "private k nearest neighbours");
  knn->add_option("--point", point, "X,Y,...")->delimiter(',')->required();
  knn->add_option("--k", k, "neighbours")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24))
      ->required();
  add_query_options(knn);
  auto* threshold = app.add_subcommand("threshold", "is a curator's count below q·N?");
  threshold->add_option("--device", device, "the curator's device id")->required();
  threshold->add_option("--q", q, "fraction q")->required();
  threshold->add_option("--population", population, "N")->required();
  add_query_options(threshold);
  auto* result = app.add_subcommand("result", "a finished query's result");
  result->add_option("--id", id, "query id")->required();
  result->add_flag("--per-user", per_user, "print every user's charge");
  if (auto done = cgp::tools::parse_command_line(app, argc, argv, "cgp-analyst")) return *done;

  cgp::transport::AnalystConnection connection;
  connection.coordinator_address = coordinator;
  connection.min_coverage = min_coverage;
  if (auto unreadable = cgp::tools::read_client_files(
          credential_file, tls_root_file, connection.credential, connection.tls_root_certificate))
    return fail(3, unreadable->message);
  auto client = cgp::transport::AnalystClient::connect(connection);
  if (!client) return fail(2, client.error().message);

  if (status->parsed()) {
    // Waiting polls with short calls on fresh connections, so that a coordinator that is still
    // starting (or a connection attempt that stalls) costs at most a second per poll.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    auto poll = [&] {
      auto probe_connection = connection;
      probe_connection.timeout = std::chrono::seconds(1);
      auto probe = cgp::transport::AnalystClient::connect(probe_connection);
      return probe ? probe->status() : cgp::Expected<cgp::transport::RemoteStatus>(probe.error());
    };
    auto s = wait_connected > 0 ? poll() : client->status();
    // A refused credential is final; an unreachable coordinator is waited for.
    while ((s ? s->connected < wait_connected : s.error().parameter == "coordinator") &&
           wait_connected > 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = poll();
    }
    if (!s) return fail(1, s.error().message);
    if (s->connected < wait_connected)
      return fail(1, "--wait-connected: " + std::to_string(s->connected) + " of " +
                         std::to_string(wait_connected) + " devices connected after " +
                         cgp::format_number(timeout) + " s");
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

  cgp::coordinator::QueryOptions options;
  auto parsed_method = cgp::coordinator::parse_method(method);
  if (!parsed_method) return fail(2, "--method: " + parsed_method.error().message);
  options.method = *parsed_method;
  auto parsed_split = cgp::privacy::parse_split_schedule(split);
  if (!parsed_split) return fail(2, "--split: " + parsed_split.error().message);
  options.split = *parsed_split;
  options.rounds = rounds;
  options.beta = beta;
  options.shift = !no_shift;
  options.query_id = id;
  const auto charges = rho > 0 ? cgp::transport::RemoteCharges::fixed(cgp::coordinator::Charge{rho})
                               : cgp::transport::RemoteCharges::adaptive();

  cgp::Expected<cgp::transport::RemoteResult> answer =
      cgp::Error{cgp::ErrorCode::invalid_argument, "command", "command: none given"};
  std::string kind;
  if (range->parsed()) {
    kind = "range";
    std::optional<cgp::geometry::Region> region;
    if (!box.empty() == !disc.empty()) return fail(2, "range needs one of --box or --disc");
    if (!box.empty()) {
      const double lo[2] = {box[0], box[1]}, hi[2] = {box[2], box[3]};
      auto made = cgp::geometry::Box::create(lo, hi);
      if (!made) return fail(2, "--box: " + made.error().message);
      region = *made;
    } else {
      const double centre[2] = {disc[0], disc[1]};
      auto made = cgp::geometry::Ball::create(centre, disc[2]);
      if (!made) return fail(2, "--disc: " + made.error().message);
      region = *made;
    }
    answer = client->range_count(*region, charges, options);
  } else if (kde->parsed()) {
    kind = "kde";
    answer = client->kde(point, bandwidth, charges, options);
  } else if (knn->parsed()) {
    kind = "knn";
    answer = client->knn(point, k, charges, options);
  } else if (threshold->parsed()) {
    kind = "threshold";
    answer = client->threshold(device, q, population, charges, options);
  } else if (result->parsed()) {
    answer = client->result(id);
    kind = answer && !answer->neighbour_ids.empty() ? "knn" : "range";
  }
  if (!answer) return fail(1, answer.error().message);
  std::printf("%s\n", to_json(*answer, kind, per_user).dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cgp::tools::guarded_main("cgp-analyst", [&] { return run(argc, argv); });
}

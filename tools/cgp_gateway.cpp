// cgp-gateway: one gateway of the live tier (docs/cluster.md). It holds the devices of the
// virtual shards the cluster gives it, runs the coordinator's queries over them, and keeps its
// shards' budget mirror in the cluster's PostgreSQL.
//
//   cgp-gateway --cluster CONNINFO --id ID --credential FILE [--coordinator HOST:PORT]
//               [--listen ADDR] [--device-frames-listen ADDR] [--tls-cert F --tls-key F]
//               [--control-tls-root F] [--advertise HOST:PORT] [--lease-ttl-ms MS]
//               [--round-deadline-ms MS] [--enrolment-reload-ms MS] [--metrics-listen ADDR]
//
// Without --coordinator it dials the control port the leading coordinator announced in the
// cluster. Crash-only: its shards are fixed for its life; it exits 4 when its lease lapses or
// cannot be renewed, its control stream ends, the cluster moved shards to or from it, or devices
// were enrolled on its shards (at most once per --enrolment-reload-ms), for its supervisor to
// start it again (it then loads what it owns now, and dials the leader of now).
// SIGTERM/SIGINT stop it (exit 0) and give its lease up. Exit 2 on bad arguments, 3 on unreadable
// files, 1 when it cannot start.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <thread>

#include "cgp/common/files.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cli_support.hpp"
#include "gateway_node.hpp"
#include "guarded_main.hpp"

namespace {

std::atomic<bool> stop_requested{false};

void on_signal(int) {
  stop_requested = true;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-gateway: %s\n", message.c_str());
  return code;
}

int run(int argc, char** argv) {
  CLI::App app{"cgp-gateway: one gateway of a cgpkit live tier"};
  cgp::tools::add_common_flags(app, /*config_file=*/true);
  cgp::tools::GatewayNodeOptions options;
  std::string credential_file, tls_cert_file, tls_key_file, control_root_file;
  long long lease_ms = 10000, deadline_ms = 5000;
  app.add_option("--cluster", options.cluster, "libpq connection string of the cluster")
      ->required();
  app.add_option("--id", options.gateway_id, "this gateway's id")->required();
  app.add_option("--credential", credential_file, "file holding this gateway's credential")
      ->required();
  app.add_option("--coordinator", options.coordinator,
                 "HOST:PORT of the coordinator's control port (default: the leader's, as it "
                 "announced it in the cluster)");
  app.add_option("--listen", options.listen, "the gRPC device port")->capture_default_str();
  app.add_option("--device-frames-listen", options.frames_listen,
                 "the TLS frames device port (needs --tls-cert)");
  app.add_option("--tls-cert", tls_cert_file, "PEM certificate chain of the device ports");
  app.add_option("--tls-key", tls_key_file, "PEM private key of the device ports");
  app.add_option("--control-tls-root", control_root_file,
                 "PEM root of the coordinator's control port (none: plaintext)");
  app.add_option("--advertise", options.advertise,
                 "HOST:PORT recorded with the lease for HAProxy (default: --listen)");
  app.add_option("--lease-ttl-ms", lease_ms, "the gateway lease")
      ->check(CLI::Range(300LL, 600000LL))
      ->capture_default_str();
  app.add_option("--round-deadline-ms", deadline_ms, "how long a round waits for devices")
      ->check(CLI::Range(10LL, 3600000LL))
      ->capture_default_str();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "HOST:PORT for Prometheus' GET /metrics (none by default)");
  long long enrolment_reload_ms = 30000;
  app.add_option("--enrolment-reload-ms", enrolment_reload_ms,
                 "devices enrolled on its shards since it loaded: restart to take them in, once "
                 "it has served this long (until then queries list them unanswered)")
      ->check(CLI::Range(0LL, 86400000LL))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  options.lease_ttl = std::chrono::milliseconds(lease_ms);
  options.round_deadline = std::chrono::milliseconds(deadline_ms);
  options.enrolment_reload = std::chrono::milliseconds(enrolment_reload_ms);
  const auto read = [](const std::string& path, const char* parameter, std::string& into) -> int {
    if (path.empty()) return 0;
    auto text = cgp::read_file(path, parameter);
    if (!text) return fail(3, text.error().to_string());
    into = std::move(*text);
    return 0;
  };
  auto credential = cgp::read_secret(credential_file, "credential");
  if (!credential) return fail(3, credential.error().to_string());
  options.credential = std::move(*credential);
  if (int code = read(tls_cert_file, "tls_cert", options.tls_certificate_chain)) return code;
  if (int code = read(tls_key_file, "tls_key", options.tls_private_key)) return code;
  if (int code = read(control_root_file, "control_tls_root", options.control_tls_root)) return code;

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  const auto log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto node = cgp::tools::GatewayNode::start(options, log);
  if (!node) return fail(1, node.error().to_string());
  log("event=gateway-serving id=" + options.gateway_id +
      " device_port=" + std::to_string((*node)->device_port()) +
      " frames_port=" + std::to_string((*node)->frames_port()) + " metrics_port=" +
      std::to_string((*node)->metrics_port()) + " users=" + std::to_string((*node)->users()));
  const std::string reason = (*node)->run_until(stop_requested);
  node->reset();
  if (!reason.empty()) return fail(4, "stopping: " + reason);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cgp::protocol::turn_off_lock_order_graph();
  return cgp::tools::guarded_main("cgp-gateway", [&] { return run(argc, argv); });
}

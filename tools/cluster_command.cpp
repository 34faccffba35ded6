#include "cluster_command.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "cgp/common/files.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/transport/credentials.hpp"
#include "cli_support.hpp"
#include "cluster_coordinator.hpp"

namespace cgp::tools {

namespace {

std::atomic<bool> stop_requested{false};

void on_signal(int) {
  stop_requested = true;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-coordinator: %s\n", message.c_str());
  return code;
}

}  // namespace

void cluster_command_flags(CLI::App& command, ClusterCommandArguments& a) {
  command.add_option("--cluster", a.cluster, "libpq connection string of the cluster")->required();
  command.add_option("--analyst-credential", a.analyst_file, "file holding the analyst credential")
      ->required();
  command.add_option("--control-listen", a.control_listen, "HOST:PORT gateways attach to")
      ->capture_default_str();
  command.add_option("--control-advertise", a.control_advertise,
                     "HOST:PORT gateways dial, announced in the cluster (default: the control "
                     "port's own address)");
  command.add_option("--analyst-listen", a.analyst_listen, "HOST:PORT of the Analyst API")
      ->capture_default_str();
  command.add_option("--analyst-advertise", a.analyst_advertise,
                     "HOST:PORT analysts dial, announced in the cluster (default: the Analyst "
                     "port's own address)");
  command.add_option("--metrics-listen", a.metrics_listen,
                     "HOST:PORT for Prometheus' GET /metrics while leading (none by default)");
  command.add_option("--tls-cert", a.tls_cert, "PEM certificate chain of both ports");
  command.add_option("--tls-key", a.tls_key, "PEM private key of both ports");
  command.add_option("--horizon", a.horizon, "queries the adaptive allocation plans for")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  command
      .add_option("--min-gateways", a.min_gateways,
                  "live gateways to wait for before the first shards are given out")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  command
      .add_option("--poll-ms", a.poll_ms,
                  "how often a standby tries to lead, and the leader "
                  "checks its lead and the gateways' leases")
      ->check(CLI::Range(50L, 60000L))
      ->capture_default_str();
  command.add_option("--haproxy-socket", a.haproxy_socket, "HAProxy's admin socket");
  command.add_option("--haproxy-map", a.haproxy_map, "the shard map file HAProxy's config names");
  command.add_option("--address-template", a.address_template,
                     "the devices' address template, e.g. s{shard}.devices.example.org:443");
  command.add_flag("--quiet", a.quiet, "no event log on stderr");
}

int run_cluster_command(const ClusterCommandArguments& a) {
  ClusterCoordinatorOptions options;
  options.cluster = a.cluster;
  options.control_listen = a.control_listen;
  options.control_advertise = a.control_advertise;
  options.analyst_listen = a.analyst_listen;
  options.analyst_advertise = a.analyst_advertise;
  options.horizon = static_cast<std::uint32_t>(a.horizon);
  options.min_gateways = a.min_gateways;
  options.poll = std::chrono::milliseconds(a.poll_ms);
  options.haproxy_socket = a.haproxy_socket;
  options.haproxy_map = a.haproxy_map;
  options.address_template = a.address_template;
  options.metrics_listen = a.metrics_listen;
  if (a.tls_cert.empty() != a.tls_key.empty())
    return fail(2, "--tls-cert and --tls-key go together");
  if (!a.tls_cert.empty()) {
    auto chain = read_file(a.tls_cert, "--tls-cert");
    if (!chain) return fail(3, chain.error().message);
    auto key = read_file(a.tls_key, "--tls-key");
    if (!key) return fail(3, key.error().message);
    options.tls_certificate_chain = std::move(*chain);
    options.tls_private_key = std::move(*key);
  }
  auto secret = read_secret(a.analyst_file, "--analyst-credential");
  if (!secret) return fail(3, secret.error().message);
  options.analyst_credential_sha256 = transport::sha256_of(*secret);

  static std::mutex log_mutex;
  const auto log = [quiet = a.quiet](const std::string& line) {
    if (quiet) return;
    std::lock_guard lock(log_mutex);
    std::fprintf(stderr, "%s\n", line.c_str());
  };
  protocol::route_grpc_logs(log);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  auto coordinator = ClusterCoordinator::lead(options, log, stop_requested);
  if (!coordinator) {
    if (stop_requested) return 0;
    const auto& error = coordinator.error();
    const bool bad_argument =
        error.code == ErrorCode::invalid_argument || error.code == ErrorCode::out_of_range;
    return fail(
        bad_argument && error.parameter != "postgres" && error.parameter != "cluster" ? 2 : 1,
        error.to_string());
  }
  const std::string reason = (*coordinator)->run_until(stop_requested);
  coordinator->reset();
  if (!reason.empty()) return fail(4, "stopping: " + reason);
  return 0;
}

}  // namespace cgp::tools

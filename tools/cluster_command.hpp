// `cgp-coordinator cluster`: the round driver of a live tier (cluster_coordinator.hpp), its
// flags and its run.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace cgp::tools {

struct ClusterCommandArguments {
  std::string cluster, control_listen = "127.0.0.1:7072", control_advertise,
                       analyst_listen = "127.0.0.1:7071", analyst_advertise, analyst_file, tls_cert,
                       tls_key, haproxy_socket, haproxy_map, address_template, metrics_listen;
  std::size_t horizon = 20, min_gateways = 1;
  long poll_ms = 500;
  bool quiet = false;
};

void cluster_command_flags(CLI::App& command, ClusterCommandArguments& a);

// Exit 0 on SIGINT/SIGTERM; 1 when it cannot start; 2 on bad arguments; 3 on unreadable files;
// 4 when it lost the lead (its supervisor starts it again, as a standby).
int run_cluster_command(const ClusterCommandArguments& a);

}  // namespace cgp::tools

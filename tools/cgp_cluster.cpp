// cgp-cluster: an operator's commands on a live tier's PostgreSQL (docs/cluster.md).
//
//   cgp-cluster init --cluster CONNINFO --shards N --budget RHO
//   cgp-cluster enrol --cluster CONNINFO --id ID --credential-out FILE
//   cgp-cluster enrol --cluster CONNINFO --count N [--prefix P] --secrets-out FILE
//   cgp-cluster revoke --cluster CONNINFO --id ID
//   cgp-cluster add-gateway --cluster CONNINFO --id ID --credential-out FILE
//   cgp-cluster status --cluster CONNINFO
//   cgp-cluster haproxy-config --gateway ID=GRPC_ADDR[,FRAMES_ADDR] ... --address-template T
//               --admin-socket PATH --map PATH [--grpc-listen ADDR] [--frames-listen ADDR]
//               --out FILE
//
// Credentials are made here (32 random bytes as 64 hex characters) and written to files only
// their owner reads; the cluster keeps their SHA-256 digests. Files are never overwritten.
// Exit 0 on success; 1 when the cluster cannot be reached or refuses (e.g. an id enrolled twice);
// 2 on bad arguments; 3 on a file that cannot be written.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/haproxy.hpp"
#include "cgp/common/files.hpp"
#include "cgp/transport/credentials.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-cluster: %s\n", message.c_str());
  return code;
}

cgp::Expected<std::unique_ptr<cgp::cluster::ClusterStore>> open(const std::string& conninfo) {
  return cgp::cluster::ClusterStore::open(conninfo);
}

int write_secret(const std::string& path, const std::string& flag, const std::string& text) {
  if (auto written = cgp::write_private_file(path, flag, text, /*overwrite=*/false); !written)
    return fail(written.error().code == cgp::ErrorCode::already_exists ? 2 : 3,
                written.error().to_string());
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"cgp-cluster: an operator's commands on a cgpkit live tier's PostgreSQL"};
  cgp::tools::add_common_flags(app, /*config_file=*/false);
  app.require_subcommand(1);
  std::string conninfo, id, credential_out, secrets_out, prefix = "device-";
  std::uint32_t shards = 0;
  double budget = 0;
  std::size_t count = 0;
  const auto cluster_flag = [&](CLI::App* command) {
    command->add_option("--cluster", conninfo, "libpq connection string of the cluster")
        ->required();
  };
  auto* init = app.add_subcommand("init", "set the fleet's shard count and budget (once)");
  cluster_flag(init);
  init->add_option("--shards", shards, "virtual shards (fixed for the fleet's life)")
      ->required()
      ->check(CLI::Range(1u, 1u << 20));
  init->add_option("--budget", budget, "every device's budget (rho)")->required();
  auto* enrol = app.add_subcommand("enrol", "enrol devices: one, or --count of them");
  cluster_flag(enrol);
  enrol->add_option("--id", id, "one device's id");
  enrol->add_option("--credential-out", credential_out, "its credential's file (must not exist)");
  enrol->add_option("--count", count, "enrol PREFIX0 .. PREFIX(N-1)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}));
  enrol->add_option("--prefix", prefix, "id prefix for --count")->capture_default_str();
  enrol->add_option("--secrets-out", secrets_out, "CSV id,credential for --count (must not exist)");
  auto* revoke = app.add_subcommand("revoke", "revoke a device (it keeps its user index)");
  cluster_flag(revoke);
  revoke->add_option("--id", id, "the device's id")->required();
  auto* gateway = app.add_subcommand("add-gateway", "register a gateway and make its credential");
  cluster_flag(gateway);
  gateway->add_option("--id", id, "the gateway's id")->required();
  gateway->add_option("--credential-out", credential_out, "its credential's file (must not exist)")
      ->required();
  auto* status = app.add_subcommand("status", "the fleet, its gateways and their shards");
  cluster_flag(status);
  auto* haproxy = app.add_subcommand(
      "haproxy-config", "write HAProxy's configuration for these gateways (docs/cluster.md)");
  std::vector<std::string> gateway_specs;
  cgp::cluster::HaproxySettings proxy;
  std::string config_out;
  haproxy
      ->add_option("--gateway", gateway_specs,
                   "ID=GRPC_ADDR[,FRAMES_ADDR] of each gateway's device ports (GRPC_ADDR may be "
                   "empty)")
      ->required();
  haproxy->add_option("--grpc-listen", proxy.grpc_listen, "where devices dial gRPC");
  haproxy->add_option("--frames-listen", proxy.frames_listen, "where devices dial frames");
  haproxy->add_option("--admin-socket", proxy.admin_socket, "HAProxy's admin socket")->required();
  haproxy->add_option("--map", proxy.map_path, "the shard map file")->required();
  haproxy
      ->add_option("--address-template", proxy.address_template,
                   "the devices' address template, e.g. s{shard}.devices.example.org:443")
      ->required();
  haproxy->add_option("--max-connections", proxy.max_connections, "HAProxy's maxconn")
      ->capture_default_str();
  haproxy->add_option("--out", config_out, "the configuration file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (haproxy->parsed()) {  // no cluster needed
    std::vector<cgp::cluster::HaproxyGateway> gateways;
    for (const auto& spec : gateway_specs) {
      const auto equals = spec.find('=');
      if (equals == std::string::npos || equals == 0)
        return fail(2, "--gateway: expected ID=GRPC_ADDR[,FRAMES_ADDR], got '" + spec + "'");
      const std::string addresses = spec.substr(equals + 1);
      const auto comma = addresses.find(',');
      gateways.push_back({spec.substr(0, equals), addresses.substr(0, comma),
                          comma == std::string::npos ? "" : addresses.substr(comma + 1)});
    }
    auto config = cgp::cluster::haproxy_config(proxy, gateways);
    if (!config) return fail(2, config.error().to_string());
    if (auto written = cgp::write_private_file(config_out, "--out", *config, /*overwrite=*/true);
        !written)
      return fail(3, written.error().to_string());
    return 0;
  }
  auto store = open(conninfo);
  if (!store) return fail(1, store.error().to_string());

  if (init->parsed()) {
    if (auto done = (*store)->initialize({shards, budget}); !done)
      return fail(done.error().parameter == "budget" ? 2 : 1, done.error().to_string());
    std::printf("cluster: %u virtual shards, budget %g\n", shards, budget);
    return 0;
  }
  if (enrol->parsed()) {
    const bool one = !id.empty() && !credential_out.empty() && count == 0;
    const bool many = id.empty() && count > 0 && !secrets_out.empty();
    if (!one && !many)
      return fail(2, "enrol needs either --id and --credential-out, or --count and --secrets-out");
    std::vector<std::pair<std::string, cgp::cluster::Sha256>> devices;
    std::string secrets;
    for (std::size_t i = 0; i < (one ? 1 : count); ++i) {
      const std::string device = one ? id : prefix + std::to_string(i);
      const std::string secret = cgp::transport::new_credential();
      devices.push_back({device, cgp::transport::sha256_of(secret)});
      secrets += one ? secret + "\n" : device + "," + secret + "\n";
    }
    // The secrets first: a file that cannot be written enrols nobody.
    if (int code = write_secret(one ? credential_out : secrets_out,
                                one ? "--credential-out" : "--secrets-out", secrets))
      return code;
    auto enrolled = (*store)->enrol_all(devices);
    if (!enrolled) return fail(1, enrolled.error().to_string());
    for (const auto& user : *enrolled)
      if (one)
        std::printf("%s: user %llu, shard %u\n", user.device_id.c_str(),
                    static_cast<unsigned long long>(user.user_index), user.shard);
    if (!one) std::printf("enrolled %zu devices\n", enrolled->size());
    return 0;
  }
  if (revoke->parsed()) {
    if (auto done = (*store)->revoke(id); !done) return fail(1, done.error().to_string());
    std::printf("%s: revoked\n", id.c_str());
    return 0;
  }
  if (gateway->parsed()) {
    const std::string secret = cgp::transport::new_credential();
    if (int code = write_secret(credential_out, "--credential-out", secret + "\n")) return code;
    if (auto done = (*store)->register_gateway(id, cgp::transport::sha256_of(secret)); !done)
      return fail(1, done.error().to_string());
    std::printf("%s: registered\n", id.c_str());
    return 0;
  }
  // status
  auto settings = (*store)->settings();
  if (!settings) return fail(1, settings.error().to_string());
  auto users = (*store)->fleet_users();
  auto gateways = (*store)->gateways();
  auto owners = (*store)->shard_owners();
  auto epoch = (*store)->coordinator_epoch();
  if (!users || !gateways || !owners || !epoch) return fail(1, "the cluster could not be read");
  auto leader = (*store)->leader();
  const bool announced = leader && !leader->control_address.empty();
  std::printf(
      "shards %u, budget %g, users %llu, coordinator epoch %lld, leader control %s "
      "analyst %s\n",
      settings->shard_count, settings->budget, static_cast<unsigned long long>(*users),
      static_cast<long long>(*epoch), announced ? leader->control_address.c_str() : "-",
      announced ? leader->analyst_address.c_str() : "-");
  for (const auto& g : *gateways) {
    std::size_t held = 0;
    for (const auto& o : *owners) held += o.gateway_id == g.gateway_id ? 1 : 0;
    std::printf("gateway %s %s %s, %zu shards\n", g.gateway_id.c_str(),
                g.address.empty() ? "-" : g.address.c_str(), g.alive ? "alive" : "lapsed", held);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cgp::tools::guarded_main("cgp-cluster", [&] { return run(argc, argv); });
}

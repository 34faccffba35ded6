// HAProxy in front of the live tier's gateways (docs/cluster.md): TCP mode, TLS left to the
// gateways, each device routed by the TLS server name it sends (SNI: its virtual shard's name,
// docs/protocol.md §2c) through a map of shard names to gateways. A shard moves at run time with
// one command on HAProxy's admin socket (`set map`), without a reload; a new gateway needs a new
// configuration (HAProxy's hitless reload).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::cluster {

struct HaproxyGateway {
  std::string gateway_id;      // letters, digits, '-', '_', '.' (an HAProxy backend name)
  std::string grpc_address;    // host:port of its gRPC device port ("" if it has none)
  std::string frames_address;  // host:port of its TLS frames device port ("" if none)
};

struct HaproxySettings {
  std::string grpc_listen;    // where devices dial gRPC ("" for none), e.g. "0.0.0.0:443"
  std::string frames_listen;  // where devices dial frames ("" for none)
  std::string admin_socket;   // HAProxy's admin socket (a path)
  std::string map_path;       // the shard map file the configuration names
  // The devices' address template (docs/protocol.md §2c); its host part, lower case, is what
  // SNI carries, e.g. "s{shard}.devices.example.org" of "s{shard}.devices.example.org:443".
  std::string address_template;
  std::uint32_t max_connections = 200000;
};

// The configuration: one frontend per transport, one backend per gateway and transport, TCP
// keepalive both ways (devices idle for long; the kernel finds dead peers), and connections
// without a known server name refused. Errors name "gateway_id" or "address_template".
Expected<std::string> haproxy_config(const HaproxySettings& settings,
                                     std::span<const HaproxyGateway> gateways);
// The map file: "<shard host> <gateway id>" per owned shard.
Expected<std::string> haproxy_map(const std::string& address_template,
                                  std::span<const ShardOwner> owners);
// The SNI name of `shard` (the template's host, lower case).
std::string shard_host(const std::string& address_template, std::uint32_t shard);

// One command on the admin socket and HAProxy's answer. Errors name "haproxy": unreachable.
Expected<std::string> haproxy_command(const std::string& admin_socket, const std::string& command);
// Routes `shard` to `gateway_id` now (new connections; open ones stay where they are). Errors
// name "haproxy" with HAProxy's answer when it refuses.
Status haproxy_route_shard(const std::string& admin_socket, const std::string& map_path,
                           const std::string& address_template, std::uint32_t shard,
                           const std::string& gateway_id);

}  // namespace cgp::cluster

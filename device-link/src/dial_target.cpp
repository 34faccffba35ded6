// Where a device's session dials, and by which name: its shard's address in a live fleet
// spread over gateways, and an address to dial instead (DeviceConnection::connect_to).
#include "cgp/common/validate.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "coordinator_stream.hpp"

namespace cgp::link::detail {

bool split_address(const std::string& address, std::string& host, std::string& port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  host = address.substr(0, colon);
  port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return !host.empty();
}

DialTarget dial_target(const DeviceConnection& connection) {
  DialTarget target;
  target.name_address =
      connection.virtual_shards > 0
          ? protocol::shard_address(
                connection.coordinator_address,
                protocol::virtual_shard(connection.device_id, connection.virtual_shards))
          : connection.coordinator_address;
  target.dial_address = connection.connect_to.empty() ? target.name_address : connection.connect_to;
  return target;
}

Status check_dial_target(const DeviceConnection& connection) {
  if (connection.virtual_shards > protocol::kMaxVirtualShards)
    return make_error(ErrorCode::out_of_range, "virtual_shards",
                      "virtual_shards must be at most " +
                          std::to_string(protocol::kMaxVirtualShards) + ", got " +
                          std::to_string(connection.virtual_shards));
  if (connection.virtual_shards > 0) {
    const Status usable = protocol::validate_address_template(connection.coordinator_address);
    if (!usable)
      return make_error(ErrorCode::invalid_argument, "coordinator_address",
                        "coordinator_address: " + usable.error().message);
  }
  std::string host, port;
  if (!connection.connect_to.empty() && !split_address(connection.connect_to, host, port))
    return make_error(ErrorCode::invalid_argument, "connect_to",
                      "connect_to must be host:port, got \"" + connection.connect_to + "\"");
  return {};
}

}  // namespace cgp::link::detail

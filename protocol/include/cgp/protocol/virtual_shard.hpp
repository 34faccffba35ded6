// Which virtual shard a device belongs to, and the host name it dials for it: a public rule the
// device, its gateway, the coordinator and the load balancer must agree on (docs/protocol.md
// §2c), stated once here. A function of the device's id only, which is public (it travels in
// Hello): where a device connects reveals nothing about its user's data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::protocol {

// A live fleet's number of virtual shards unless its operator chose another (fixed for the
// fleet's life: a device's shard never moves, only the shard's gateway does).
inline constexpr std::uint32_t kDefaultVirtualShards = 4096;
// At most this many: a shard number fits a host-name label and a HAProxy map stays small.
inline constexpr std::uint32_t kMaxVirtualShards = 1u << 20;

// The first 8 bytes of SHA-256(device_id) as a big-endian integer, modulo `shard_count`
// (1 ≤ shard_count ≤ kMaxVirtualShards; 0 is taken as 1). Uniform over shards for any ids.
std::uint32_t virtual_shard(std::string_view device_id, std::uint32_t shard_count) noexcept;

// A device's address for its shard: `address_template` with every "{shard}" replaced by the
// decimal shard number, e.g. "s{shard}.devices.example.org:443" -> "s17.devices.example.org:443".
// A template without "{shard}" is one address for every shard (a single coordinator).
std::string shard_address(std::string_view address_template, std::uint32_t shard);
// A template a device can dial: not empty, at most 253 characters, braces only as "{shard}".
// Errors name "address_template".
Status validate_address_template(std::string_view address_template);

}  // namespace cgp::protocol

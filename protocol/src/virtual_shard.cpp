#include "cgp/protocol/virtual_shard.hpp"

#include <openssl/sha.h>

namespace cgp::protocol {

namespace {
constexpr std::string_view kShardField = "{shard}";
}

std::uint32_t virtual_shard(std::string_view device_id, std::uint32_t shard_count) noexcept {
  if (shard_count <= 1) return 0;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(device_id.data()), device_id.size(), digest);
  std::uint64_t head = 0;
  for (int i = 0; i < 8; ++i) head = (head << 8) | digest[i];
  return static_cast<std::uint32_t>(head % shard_count);
}

std::string shard_address(std::string_view address_template, std::uint32_t shard) {
  std::string out;
  const std::string number = std::to_string(shard);
  std::size_t from = 0;
  for (std::size_t at; (at = address_template.find(kShardField, from)) != std::string_view::npos;
       from = at + kShardField.size()) {
    out.append(address_template.substr(from, at - from));
    out.append(number);
  }
  out.append(address_template.substr(from));
  return out;
}

Status validate_address_template(std::string_view address_template) {
  if (address_template.empty())
    return make_error(ErrorCode::invalid_argument, "address_template",
                      "address_template must not be empty");
  if (address_template.size() > 253)
    return make_error(ErrorCode::too_large, "address_template",
                      "address_template must be at most 253 characters, got " +
                          std::to_string(address_template.size()));
  std::string rest(address_template);
  for (std::size_t at; (at = rest.find(kShardField)) != std::string::npos;)
    rest.erase(at, kShardField.size());
  if (rest.find_first_of("{}") != std::string::npos)
    return make_error(ErrorCode::invalid_argument, "address_template",
                      "address_template may hold braces only as {shard}, got \"" +
                          std::string(address_template) + "\"");
  return {};
}

}  // namespace cgp::protocol

#include "cgp/transport/credentials.hpp"

#include <sodium.h>

#include <fstream>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/transport/log_format.hpp"

namespace cgp::transport {

CredentialSha256 sha256_of(std::string_view secret) {
  CredentialSha256 digest;
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(secret.data()),
                     secret.size());
  return digest;
}

std::string sha256_hex(const CredentialSha256& digest) {
  std::string hex(2 * digest.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  hex.pop_back();
  return hex;
}

bool credential_matches(std::string_view secret, const CredentialSha256& digest) {
  if (secret.size() > wire::kMaxCredentialBytes) return false;
  const auto presented = sha256_of(secret);
  return sodium_memcmp(presented.data(), digest.data(), digest.size()) == 0;
}

std::string new_credential() {
  if (sodium_init() < 0) return {};
  std::array<unsigned char, 32> bytes;
  randombytes_buf(bytes.data(), bytes.size());
  return sha256_hex(bytes);  // the same hex encoding, of the random bytes themselves
}

Expected<std::vector<std::pair<std::string, CredentialSha256>>> read_enrolment(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::invalid_argument, "devices", "cannot read " + path);
  std::vector<std::pair<std::string, CredentialSha256>> out;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const auto comma = line.find(',');
    const std::string where = path + ":" + std::to_string(number);
    if (comma == std::string::npos || comma == 0 || comma > wire::kMaxIdBytes)
      return make_error(ErrorCode::invalid_argument, "devices",
                        where + ": expected 'id,sha256-hex'");
    if (auto valid = require_id("devices", std::string_view(line).substr(0, comma)); !valid)
      return make_error(ErrorCode::invalid_argument, "devices",
                        where + ": " + valid.error().message);
    CredentialSha256 digest;
    std::size_t length = 0;
    const std::string hex = line.substr(comma + 1);
    if (hex.size() != 64 ||
        sodium_hex2bin(digest.data(), digest.size(), hex.data(), hex.size(), nullptr, &length,
                       nullptr) != 0 ||
        length != digest.size())
      return make_error(ErrorCode::invalid_argument, "devices",
                        where + ": the digest must be 64 hex characters");
    out.emplace_back(line.substr(0, comma), digest);
  }
  if (out.empty()) return make_error(ErrorCode::invalid_argument, "devices", path + " is empty");
  return out;
}

}  // namespace cgp::transport

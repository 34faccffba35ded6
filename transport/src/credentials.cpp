#include "cgp/transport/credentials.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <set>
#include <sstream>

#include "cgp/common/files.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/protocol/log_format.hpp"

namespace cgp::transport {

using protocol::require_id;

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

namespace {
// Where a revoked device's digest was (not 64 hex characters: never a digest).
constexpr std::string_view kRevokedMark = "revoked";
}  // namespace

Expected<Enrolment> read_enrolment(const std::string& path) {
  CGP_ASSIGN_OR_RETURN(auto text, read_file(path, "devices", kMaxEnrolmentFileBytes));
  std::istringstream in(std::move(text));
  Enrolment out;
  std::set<std::string, std::less<>> seen;
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
    std::string id = line.substr(0, comma);
    // A duplicate would make "user i" ambiguous: refused.
    if (!seen.insert(id).second)
      return make_error(ErrorCode::already_exists, "devices",
                        where + ": device id '" + id + "' is enrolled twice");
    const std::string hex = line.substr(comma + 1);
    if (hex == kRevokedMark) {
      out.push_back({std::move(id), std::nullopt});
      continue;
    }
    CredentialSha256 digest;
    std::size_t length = 0;
    if (hex.size() != 64 ||
        sodium_hex2bin(digest.data(), digest.size(), hex.data(), hex.size(), nullptr, &length,
                       nullptr) != 0 ||
        length != digest.size())
      return make_error(ErrorCode::invalid_argument, "devices",
                        where + ": the digest must be 64 hex characters (or 'revoked')");
    out.push_back({std::move(id), digest});
  }
  return out;
}

Status write_enrolment(const std::string& path, const Enrolment& entries) {
  std::string text = "# cgpkit enrolment: device id, SHA-256 of its credential\n";
  for (const auto& [id, credential] : entries)
    text += id + "," + (credential ? sha256_hex(*credential) : std::string(kRevokedMark)) + "\n";
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  // Created afresh (O_EXCL: never through a link someone planted at that name).
  ::unlink(temporary.c_str());
  if (auto written = write_private_file(temporary, "devices", text, /*overwrite=*/false);
      !written) {
    ::unlink(temporary.c_str());
    return written;
  }
  ::chmod(temporary.c_str(), 0644);  // digests, not secrets: readable like a config file
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return make_error(ErrorCode::invalid_argument, "devices",
                      "devices: cannot replace " + path + ": " + std::strerror(error));
  }
  // The rename itself reaches the disk: a revoke must survive a power cut.
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return {};
}

}  // namespace cgp::transport

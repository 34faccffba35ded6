// Credentials of devices and analysts: the coordinator keeps SHA-256 digests only and compares
// them in constant time; enrolment files hold "id,sha256-hex" lines.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::transport {

using CredentialSha256 = std::array<unsigned char, 32>;

CredentialSha256 sha256_of(std::string_view secret);
std::string sha256_hex(const CredentialSha256& digest);
// Does `secret` hash to `digest`? Constant-time in the digest; a secret over the wire limit
// (4 KiB) never matches.
bool credential_matches(std::string_view secret, const CredentialSha256& digest);
// A fresh credential: 32 random bytes from the OS, as 64 hex characters.
std::string new_credential();
// An enrolment file (cgp-coordinator enrol / serve --devices): "id,sha256-hex" lines, '#'
// comments. Errors name the file and line; an id enrolled twice is an error (already_exists).
// A revoked device keeps its line as "id,revoked": users are numbered in enrolment order, and
// stored results, `--users` and watches name them by that number, so a revoke must never move
// another device to a new number. Enrolling a revoked id again fills its line in place.
// A file with no entries is an empty enrolment; serving needs one device that is not revoked.
struct EnrolledDevice {
  std::string id;
  std::optional<CredentialSha256> credential;  // empty: revoked, never admitted
  bool revoked() const { return !credential.has_value(); }
};
using Enrolment = std::vector<EnrolledDevice>;
Expected<Enrolment> read_enrolment(const std::string& path);
// Replaces the enrolment file atomically (a temporary file beside it, synced, renamed over it):
// a crash leaves the old file or the new one, never half of one.
Status write_enrolment(const std::string& path, const Enrolment& entries);

}  // namespace cgp::transport

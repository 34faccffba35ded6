// Reading and writing the files the network programs take: PEM certificates, credentials,
// enrolment files. Every failure is a named error that names the flag or option it came from.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"

namespace cgp {

inline constexpr std::size_t kMaxPemFileBytes = std::size_t{1} << 20;        // a certificate chain
inline constexpr std::size_t kMaxSecretFileBytes = 4096;                     // a credential
inline constexpr std::size_t kMaxEnrolmentFileBytes = std::size_t{1} << 30;  // ~10 M devices

// The whole file, bytes as they are. Refused by name (`parameter`): a path that cannot be
// opened, a directory or device (/dev/zero) rather than a regular file, or more than max_bytes.
Expected<std::string> read_file(const std::string& path, std::string_view parameter,
                                std::size_t max_bytes = kMaxPemFileBytes);
// A credential file: its content without trailing newlines (which editors and `echo` add);
// empty is an error.
Expected<std::string> read_secret(const std::string& path, std::string_view parameter);
// Writes `text` to `path`, readable by its owner only. An existing file is refused
// (already_exists) unless `overwrite`; a failed write (a full disk, /dev/full) is an error, never
// a success with a truncated file.
Status write_private_file(const std::string& path, std::string_view parameter,
                          std::string_view text, bool overwrite);

}  // namespace cgp

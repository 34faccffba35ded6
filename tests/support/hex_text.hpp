// Bytes and doubles as text, for the conformance vector files: bytes as lowercase hex (libsodium),
// doubles as C99 hexadecimal ("%a": exact; Python's float.fromhex reads it). Header-only: the
// including target links libsodium.
#pragma once

#include <sodium.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cgp::test {

inline std::string hex_double(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

inline double double_from_hex(const std::string& text) {
  return std::strtod(text.c_str(), nullptr);
}

inline std::string bytes_to_hex(const std::string& bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
  out.pop_back();
  return out;
}

inline std::string bytes_from_hex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  std::size_t written = 0;
  sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(), hex.size(),
                 nullptr, &written, nullptr);
  out.resize(written);
  return out;
}

}  // namespace cgp::test

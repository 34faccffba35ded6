#include "cgp/transport/files.hpp"

#include <fstream>
#include <iterator>

namespace cgp::transport {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

bool read_secret(const std::string& path, std::string& out) {
  if (!read_file(path, out)) return false;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return true;
}

}  // namespace cgp::transport

#include "cgp/cluster/mirror_blob.hpp"

#include <bit>
#include <cstring>

#include "cgp/common/validate.hpp"

namespace cgp::cluster {

namespace {

constexpr std::string_view kMagic = "CGPM";
constexpr std::uint32_t kFormat = 1;
constexpr std::size_t kHeader = 4 + 4 + 8, kEntry = 16;

void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(in[at + i]);
  return value;
}

Error blob_error(const std::string& message) {
  return make_error(ErrorCode::malformed_message, "mirror_blob", "mirror_blob: " + message);
}

}  // namespace

std::string encode_mirror_blob(std::span<const MirrorEntry> entries) {
  std::string out;
  out.reserve(kHeader + kEntry * entries.size());
  out.append(kMagic);
  put(out, kFormat, 4);
  put(out, entries.size(), 8);
  for (const MirrorEntry& entry : entries) {
    put(out, entry.user_index, 8);
    put(out, std::bit_cast<std::uint64_t>(entry.remaining), 8);
  }
  return out;
}

Expected<std::vector<MirrorEntry>> decode_mirror_blob(std::string_view blob) {
  if (blob.size() < kHeader || blob.substr(0, 4) != kMagic)
    return blob_error("not a mirror blob (no CGPM header)");
  if (const std::uint64_t format = get(blob, 4, 4); format != kFormat)
    return blob_error("format " + std::to_string(format) + " is not known to this build");
  const std::uint64_t count = get(blob, 8, 8);
  if (count > (blob.size() - kHeader) / kEntry || blob.size() != kHeader + kEntry * count)
    return blob_error("holds " + std::to_string(blob.size()) + " bytes, not the " +
                      std::to_string(count) + " entries it announces");
  std::vector<MirrorEntry> entries(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = kHeader + kEntry * i;
    entries[i] = {get(blob, at, 8), std::bit_cast<double>(get(blob, at + 8, 8))};
    if (i > 0 && entries[i].user_index <= entries[i - 1].user_index)
      return blob_error("user indices must rise, entry " + std::to_string(i) + " does not");
  }
  return entries;
}

}  // namespace cgp::cluster

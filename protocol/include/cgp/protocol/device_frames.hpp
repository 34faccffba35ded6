// The lean device transport's framing (protocol/proto/cgp/v1/device_frames.proto, docs/protocol.md
// §2b): a 4-byte big-endian length, a kind byte, the body. Shared by both ends (the coordinator's
// frame listener, the device link, the load-test swarm), so that one reader decides what a
// malformed frame is.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace google::protobuf {
class MessageLite;
}

namespace cgp::protocol {

// TLS ALPN of the lean transport: a connection that did not negotiate it is closed.
inline constexpr std::string_view kDeviceFramesAlpn = "cgp-frames/1";

enum class FrameKind : std::uint8_t { message = 1, end = 2 };

inline constexpr std::size_t kFrameHeaderBytes = 4;
// A frame's length counts its kind byte: a message of up to the protocol's maximum, plus one.
inline constexpr std::size_t kMaxFrameLength = wire::kMaxMessageBytes + 1;

struct Frame {
  FrameKind kind;
  std::string_view body;  // valid until the reader is appended to or compacted
};

// Appends one frame holding `message` to `out` (serialized in place). False: the message is
// over the protocol's maximum, and `out` is unchanged.
bool append_frame(std::string& out, FrameKind kind, const google::protobuf::MessageLite& message);

// Collects bytes as they come off a connection and cuts them into frames. An idle connection
// (every frame taken) keeps no heap buffer: compact() releases it.
class FrameReader {
 public:
  void append(const char* data, std::size_t size) { buffer_.append(data, size); }
  // The longest frame taken from now on (at most kMaxFrameLength): a coordinator takes only a
  // Hello-sized frame before the Hello is accepted, so that a client without a credential
  // cannot make it hold a megabyte.
  void set_max_length(std::size_t max_length) {
    max_length_ = std::min(max_length, kMaxFrameLength);
  }
  // The next whole frame, nullopt until one is complete, or an error naming "frame" (a length
  // of 0 or over kMaxFrameLength, an unknown kind): the connection must then be closed.
  Expected<std::optional<Frame>> next();
  // Drops the frames taken so far (views into them end); frees the buffer when nothing is left.
  void compact();
  // Bytes held that are not yet a whole frame.
  std::size_t pending() const noexcept { return buffer_.size() - taken_; }

 private:
  std::string buffer_;
  std::size_t taken_ = 0;
  std::size_t max_length_ = kMaxFrameLength;
};

}  // namespace cgp::protocol

#include "cgp/protocol/device_frames.hpp"

#include <google/protobuf/message_lite.h>

namespace cgp::protocol {

bool append_frame(std::string& out, FrameKind kind, const google::protobuf::MessageLite& message) {
  const std::size_t body = message.ByteSizeLong();
  if (body > wire::kMaxMessageBytes) return false;
  const auto length = static_cast<std::uint32_t>(body + 1);
  const std::size_t at = out.size();
  out.resize(at + kFrameHeaderBytes + 1 + body);
  auto* p = reinterpret_cast<std::uint8_t*>(out.data() + at);
  p[0] = static_cast<std::uint8_t>(length >> 24);
  p[1] = static_cast<std::uint8_t>(length >> 16);
  p[2] = static_cast<std::uint8_t>(length >> 8);
  p[3] = static_cast<std::uint8_t>(length);
  p[4] = static_cast<std::uint8_t>(kind);
  message.SerializeWithCachedSizesToArray(p + kFrameHeaderBytes + 1);
  return true;
}

Expected<std::optional<Frame>> FrameReader::next() {
  const std::size_t left = buffer_.size() - taken_;
  if (left < kFrameHeaderBytes) return std::optional<Frame>{};
  const auto* p = reinterpret_cast<const std::uint8_t*>(buffer_.data() + taken_);
  const std::size_t length = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) |
                             (std::size_t{p[2]} << 8) | std::size_t{p[3]};
  // Checked from the header alone: a peer cannot make the reader hold more than one frame.
  if (length == 0 || length > max_length_)
    return make_error(
        ErrorCode::invalid_argument, "frame",
        "frame: length " + std::to_string(length) + " is not in 1.." + std::to_string(max_length_));
  if (left - kFrameHeaderBytes < length) return std::optional<Frame>{};
  const std::uint8_t kind = p[kFrameHeaderBytes];
  if (kind != static_cast<std::uint8_t>(FrameKind::message) &&
      kind != static_cast<std::uint8_t>(FrameKind::end))
    return make_error(ErrorCode::invalid_argument, "frame",
                      "frame: kind " + std::to_string(kind) + " is not 1 (message) or 2 (end)");
  Frame frame{static_cast<FrameKind>(kind),
              std::string_view(buffer_.data() + taken_ + kFrameHeaderBytes + 1, length - 1)};
  taken_ += kFrameHeaderBytes + length;
  return std::optional<Frame>{frame};
}

void FrameReader::compact() {
  if (taken_ == 0) return;
  buffer_.erase(0, taken_);
  taken_ = 0;
  if (buffer_.empty()) std::string().swap(buffer_);
}

}  // namespace cgp::protocol

// A hostile HTTP/2 peer written frame by frame: it never acknowledges the server's SETTINGS, so
// gRPC 1.51 never applies its own max-concurrent-streams to it (the server enforces only settings
// a peer acknowledged), and it opens as many gRPC streams on one TCP connection as it likes.
// Headers are HPACK literals without indexing or Huffman (RFC 7541 §6.2.2), which every decoder
// takes; what the server sends back is only framed, not decoded: a stream that got HEADERS with
// END_STREAM (trailers) or RST_STREAM has ended.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "idle_flood.hpp"  // dial_from

namespace cgp::test {

class RawHttp2Peer {
 public:
  // Connects from `source` (a 127/8 address) and sends the preface and an empty SETTINGS.
  RawHttp2Peer(const char* source, int port) : fd_(dial_from(source, port)) {
    if (fd_ < 0) return;
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    append_frame(out, 0x4, 0, 0, "");  // SETTINGS, all defaults
    send_all(out);
  }
  ~RawHttp2Peer() {
    if (fd_ >= 0) close(fd_);
  }
  RawHttp2Peer(const RawHttp2Peer&) = delete;
  RawHttp2Peer& operator=(const RawHttp2Peer&) = delete;
  bool connected() const { return fd_ >= 0 && !closed_; }

  // Opens `count` streams calling `path`; each sends `message` (a serialized request) and
  // half-closes when `with_message`, or sends headers only and holds its request open.
  // Returns the stream ids opened.
  using Headers = std::vector<std::pair<std::string, std::string>>;
  std::vector<std::uint32_t> open_streams(const std::string& path, std::size_t count,
                                          bool with_message, const std::string& message = "",
                                          const Headers& extra = {}) {
    std::vector<std::uint32_t> ids;
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t id = next_stream_;
      next_stream_ += 2;
      ids.push_back(id);
      append_frame(out, 0x1, 0x4, id, request_headers(path, extra));  // HEADERS, END_HEADERS
      if (with_message) {
        std::string grpc_message(5, '\0');  // uncompressed, 4-byte big-endian length
        const auto length = static_cast<std::uint32_t>(message.size());
        for (int b = 0; b < 4; ++b) grpc_message[1 + b] = static_cast<char>(length >> (24 - 8 * b));
        append_frame(out, 0x0, 0x1, id, grpc_message + message);  // DATA, END_STREAM
      }
      if (out.size() > (1 << 16)) {
        send_all(out);
        out.clear();
        drain(std::chrono::milliseconds(0));  // keep the server's writes moving
      }
    }
    send_all(out);
    return ids;
  }

  // Reads what the server sent for up to `wait`, or until `done()` holds. Returns false when the
  // connection closed (GOAWAY or EOF).
  template <class Done>
  bool read_until(std::chrono::milliseconds wait, Done done) {
    const auto until = std::chrono::steady_clock::now() + wait;
    while (!done() && connected()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      drain(left);
    }
    return connected();
  }
  void drain(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    if (fd_ < 0 || ::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return;
    char buffer[1 << 16];
    const ssize_t got = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (got <= 0) {
      closed_ = true;
      return;
    }
    in_.append(buffer, static_cast<std::size_t>(got));
    parse();
  }

  // Streams the server ended (trailers or RST_STREAM), and whether it sent GOAWAY.
  const std::set<std::uint32_t>& ended() const { return ended_; }
  // Streams on which the server sent response headers or data (it is serving them).
  const std::set<std::uint32_t>& answered() const { return answered_; }
  bool got_goaway() const { return goaway_; }

 private:
  static void append_frame(std::string& out, std::uint8_t type, std::uint8_t flags,
                           std::uint32_t stream, const std::string& payload) {
    const auto n = static_cast<std::uint32_t>(payload.size());
    const char header[9] = {static_cast<char>(n >> 16),
                            static_cast<char>(n >> 8),
                            static_cast<char>(n),
                            static_cast<char>(type),
                            static_cast<char>(flags),
                            static_cast<char>(stream >> 24),
                            static_cast<char>(stream >> 16),
                            static_cast<char>(stream >> 8),
                            static_cast<char>(stream)};
    out.append(header, 9);
    out += payload;
  }
  // A literal header field without indexing, new name (0x00), strings without Huffman (< 127 B).
  static void literal(std::string& out, const std::string& name, const std::string& value) {
    out += '\0';
    out += static_cast<char>(name.size());
    out += name;
    out += static_cast<char>(value.size());
    out += value;
  }
  static std::string request_headers(const std::string& path, const Headers& extra) {
    std::string block;
    literal(block, ":method", "POST");
    literal(block, ":scheme", "http");
    literal(block, ":path", path);
    literal(block, ":authority", "localhost");
    literal(block, "content-type", "application/grpc");
    literal(block, "te", "trailers");
    for (const auto& [name, value] : extra) literal(block, name, value);
    return block;
  }
  void send_all(const std::string& out) {
    std::size_t sent = 0;
    while (sent < out.size() && connected()) {
      const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        closed_ = true;
        return;
      }
      sent += static_cast<std::size_t>(n);
    }
  }
  void parse() {
    std::size_t at = 0;
    while (in_.size() - at >= 9) {
      const auto* h = reinterpret_cast<const unsigned char*>(in_.data() + at);
      const std::size_t length = (std::size_t{h[0]} << 16) | (std::size_t{h[1]} << 8) | h[2];
      if (in_.size() - at < 9 + length) break;
      const std::uint8_t type = h[3], flags = h[4];
      const std::uint32_t stream = ((std::uint32_t{h[5]} & 0x7f) << 24) |
                                   (std::uint32_t{h[6]} << 16) | (std::uint32_t{h[7]} << 8) | h[8];
      if (type == 0x1 && (flags & 0x1)) ended_.insert(stream);  // trailers
      if (type == 0x1 && !(flags & 0x1)) answered_.insert(stream);
      if (type == 0x0 && stream != 0) answered_.insert(stream);  // a message
      if (type == 0x3) ended_.insert(stream);                    // RST_STREAM
      if (type == 0x7) goaway_ = true;
      at += 9 + length;
    }
    in_.erase(0, at);
  }

  int fd_;
  bool closed_ = false, goaway_ = false;
  std::uint32_t next_stream_ = 1;
  std::string in_;
  std::set<std::uint32_t> ended_, answered_;
};

}  // namespace cgp::test

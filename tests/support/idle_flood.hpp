// Idle TCP connections from chosen loopback addresses (any 127/8 address on Linux): a flood
// that says nothing, for the connection caps' tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

namespace cgp::test {

// A TCP connection to 127.0.0.1:port from `source` (any 127/8 address on Linux), which then
// says nothing. -1 if the connect itself fails.
inline int dial_from(const char* source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = inet_addr(source);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = inet_addr("127.0.0.1");
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Flood {
  std::vector<int> fds;
  ~Flood() {
    for (int fd : fds) close(fd);
  }
  void open(const char* source, int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = dial_from(source, port);
      REQUIRE(fd >= 0);
      fds.push_back(fd);
    }
  }
};

}  // namespace cgp::test

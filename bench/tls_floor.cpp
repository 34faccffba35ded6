// Issue 29's question, measured before anything is built: what does one TLS connection per
// device cost without gRPC? OpenSSL straight on non-blocking sockets (SSL_set_fd: no BIO pair),
// SSL_MODE_RELEASE_BUFFERS (an idle connection holds no record buffers), one epoll loop, and
// frames of a 4-byte big-endian length then the bytes — the shape a lean device transport
// behind the same protocol/ messages would have. A prototype for numbers, not product code.
//   cgp_bench_tls_floor serve PORT CERT KEY   prints "ready", answers every frame with a
//                                             120-byte frame until killed
//   cgp_bench_tls_floor dial PORT CONNECTIONS ROUNDS
//                                             connects, prints "connected N", waits for a line
//                                             on stdin, then runs ROUNDS rounds (a 160-byte frame
//                                             on every connection, then every reply) and prints
//                                             "rounds R replies N seconds S"
// bench/tls_floor.sh runs both and reads the server's RSS and CPU from /proc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kRequestBytes = 160, kReplyBytes = 120;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tls_floor: %s\n", what.c_str());
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

void non_blocking(int fd) {
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) die("fcntl");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One connection: the TLS state, what came in but is not a whole frame yet, and what could not
// be written yet. Both strings are empty (no heap) while the connection is idle.
struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  bool ready = false;  // handshake done
  std::string in, out;
  std::size_t replies = 0;
};

std::string frame(std::size_t bytes, char fill) {
  std::string f(4 + bytes, fill);
  const auto n = static_cast<std::uint32_t>(bytes);
  f[0] = static_cast<char>(n >> 24);
  f[1] = static_cast<char>(n >> 16);
  f[2] = static_cast<char>(n >> 8);
  f[3] = static_cast<char>(n);
  return f;
}

// Whole frames at the front of `in`, removed; returns how many.
std::size_t take_frames(std::string& in) {
  std::size_t frames = 0, at = 0;
  while (in.size() - at >= 4) {
    const auto* p = reinterpret_cast<const unsigned char*>(in.data() + at);
    const std::size_t n = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) |
                          (std::size_t{p[2]} << 8) | std::size_t{p[3]};
    if (in.size() - at - 4 < n) break;
    at += 4 + n;
    ++frames;
  }
  in.erase(0, at);
  if (in.empty()) std::string().swap(in);  // an idle connection keeps no buffer
  return frames;
}

// Drives the handshake, flushes `out` and reads what is there; false when the peer is gone.
// `reply` (server) answers every whole frame that came in.
bool pump(Connection& c, const std::string* reply) {
  static thread_local char buffer[16384];
  if (!c.ready) {
    const int r = SSL_do_handshake(c.ssl);
    if (r != 1) {
      const int e = SSL_get_error(c.ssl, r);
      return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    }
    c.ready = true;
  }
  for (;;) {
    const int n = SSL_read(c.ssl, buffer, sizeof buffer);
    if (n > 0) {
      c.in.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(c.ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    return false;
  }
  const std::size_t frames = take_frames(c.in);
  c.replies += frames;
  if (reply)
    for (std::size_t k = 0; k < frames; ++k) c.out += *reply;
  while (!c.out.empty()) {
    const int n = SSL_write(c.ssl, c.out.data(), static_cast<int>(c.out.size()));
    if (n <= 0) {
      const int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
      return false;
    }
    c.out.erase(0, static_cast<std::size_t>(n));
  }
  if (c.out.empty()) std::string().swap(c.out);
  return true;
}

SSL_CTX* context(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) die("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

int serve(int port, const char* cert, const char* key) {
  SSL_CTX* ctx = context(true);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) die("certificate");
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) die("key");
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) die("bind");
  if (listen(listener, 4096) != 0) die("listen");
  non_blocking(listener);
  const int poll = epoll_create1(0);
  epoll_event event{EPOLLIN, {.fd = listener}};
  epoll_ctl(poll, EPOLL_CTL_ADD, listener, &event);
  std::vector<std::unique_ptr<Connection>> by_fd;
  const std::string reply = frame(kReplyBytes, 'r');
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<epoll_event> events(1024);
  for (;;) {
    const int n = epoll_wait(poll, events.data(), static_cast<int>(events.size()), -1);
    for (int k = 0; k < n; ++k) {
      const int fd = events[static_cast<std::size_t>(k)].data.fd;
      if (fd == listener) {
        for (int client; (client = accept(listener, nullptr, nullptr)) >= 0;) {
          non_blocking(client);
          if (by_fd.size() <= static_cast<std::size_t>(client)) by_fd.resize(client + 1);
          auto c = std::make_unique<Connection>();
          c->fd = client;
          c->ssl = SSL_new(ctx);
          SSL_set_fd(c->ssl, client);
          SSL_set_accept_state(c->ssl);
          epoll_event e{EPOLLIN | EPOLLOUT | EPOLLET, {.fd = client}};
          epoll_ctl(poll, EPOLL_CTL_ADD, client, &e);
          by_fd[static_cast<std::size_t>(client)] = std::move(c);
        }
        continue;
      }
      auto& c = by_fd[static_cast<std::size_t>(fd)];
      if (c && !pump(*c, &reply)) {
        SSL_free(c->ssl);
        close(fd);
        c.reset();
      }
    }
  }
}

int dial(int port, std::size_t connections, std::size_t rounds) {
  SSL_CTX* ctx = context(false);
  const int poll = epoll_create1(0);
  std::vector<std::unique_ptr<Connection>> all;
  std::vector<Connection*> by_fd;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<epoll_event> events(1024);
  auto run_until = [&](auto done) {
    while (!done()) {
      const int n = epoll_wait(poll, events.data(), static_cast<int>(events.size()), 1000);
      for (int k = 0; k < n; ++k) {
        Connection* c =
            by_fd[static_cast<std::size_t>(events[static_cast<std::size_t>(k)].data.fd)];
        if (!pump(*c, nullptr)) die("a connection closed");
      }
    }
  };
  for (std::size_t k = 0; k < connections; ++k) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) die("connect");
    non_blocking(fd);
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->ssl = SSL_new(ctx);
    SSL_set_fd(c->ssl, fd);
    SSL_set_connect_state(c->ssl);
    if (by_fd.size() <= static_cast<std::size_t>(fd)) by_fd.resize(fd + 1);
    by_fd[static_cast<std::size_t>(fd)] = c.get();
    epoll_event e{EPOLLIN | EPOLLOUT | EPOLLET, {.fd = fd}};
    epoll_ctl(poll, EPOLL_CTL_ADD, fd, &e);
    pump(*c, nullptr);
    all.push_back(std::move(c));
    if (k % 256 == 255) run_until([&] { return true; });  // let handshakes progress
  }
  run_until([&] {
    for (const auto& c : all)
      if (!c->ready) return false;
    return true;
  });
  std::printf("connected %zu\n", all.size());
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  const std::string request = frame(kRequestBytes, 'q');
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t r = 1; r <= rounds; ++r) {
    for (auto& c : all) {
      c->out += request;
      if (!pump(*c, nullptr)) die("a connection closed");
    }
    run_until([&] {
      for (const auto& c : all)
        if (c->replies < r) return false;
      return true;
    });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rounds %zu replies %zu seconds %.3f\n", rounds, rounds * all.size(), seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 5) return serve(std::atoi(argv[2]), argv[3], argv[4]);
  if (mode == "dial" && argc == 5)
    return dial(std::atoi(argv[2]), std::strtoul(argv[3], nullptr, 10),
                std::strtoul(argv[4], nullptr, 10));
  std::fprintf(stderr,
               "usage: cgp_bench_tls_floor serve PORT CERT KEY | dial PORT CONNECTIONS ROUNDS\n");
  return 2;
}

#include "connection_admission.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/log_format.hpp"

namespace cgp::transport::detail {

using protocol::log_value;

namespace {

Error listen_error(const std::string& message) {
  return make_error(ErrorCode::invalid_argument, "listen", message);
}

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    // An IPv4 peer on a dual-stack socket counts as its IPv4 address.
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr))
      inet_ntop(AF_INET, &v6.sin6_addr.s6_addr[12], text, sizeof text);
    else
      inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
  }
  return text;
}

// The descriptors this process may use for connections: the soft limit raised to the hard one
// (as Go's runtime and nginx do), less a reserve for files, logs and gRPC's own descriptors.
std::size_t descriptor_budget() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 896;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const auto soft = static_cast<std::size_t>(std::min<rlim_t>(limit.rlim_cur, rlim_t{1} << 30));
  const std::size_t reserve = std::max<std::size_t>(128, soft / 8);
  return soft > reserve ? soft - reserve : 0;
}

}  // namespace

Expected<ListenAddress> parse_listen_address(const std::string& address) {
  ListenAddress out;
  std::string port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return listen_error("expected [IPv6]:PORT, got '" + address + "'");
    out.host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon)
      return listen_error("expected HOST:PORT or [IPv6]:PORT, got '" + address + "'");
    out.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (out.host.empty()) return listen_error("no host in '" + address + "' (0.0.0.0 for all)");
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port) > 65535)
    return make_error(ErrorCode::out_of_range, "listen",
                      "listen: the port must be 0..65535, got '" + port + "'");
  out.port = std::stoi(port);
  return out;
}

std::string peer_address(const std::string& peer_string) {
  // gRPC percent-encodes the brackets of an IPv6 peer ("ipv6:%5B::1%5D:5555").
  std::string peer = peer_string;
  for (auto [encoded, plain] : {std::pair{"%5B", "["}, std::pair{"%5D", "]"}})
    for (auto at = peer.find(encoded); at != std::string::npos; at = peer.find(encoded))
      peer.replace(at, 3, plain);
  std::string_view text = peer;
  if (const auto colon = text.find(':'); colon != std::string_view::npos)
    text.remove_prefix(colon + 1);  // "ipv4:" / "ipv6:"
  if (const auto port = text.rfind(':'); port != std::string_view::npos)
    text = text.substr(0, port);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  return std::string(text);
}

// The connections admitted, by descriptor: one ledger for every port of a gateway (the device
// port and the device frames port), so that the caps in all and per address, and the
// descriptor budget, hold for the process rather than per port.
struct ConnectionLedger {
  struct Admitted {
    ino_t inode;
    dev_t device;
    std::string address;
  };
  mutable std::mutex mutex;
  std::unordered_map<int, Admitted> admitted;  // descriptor -> the socket it was
  std::unordered_map<std::string, std::size_t> per_address;
  std::chrono::steady_clock::time_point last_sweep{};
  // Memory after a flood: glibc keeps what gRPC freed of closed connections
  // (5,000 idle connections closed: 18 -> 103 MB, for good). When the open connections fall to
  // half a peak at least kTrimAfter below it, the heap is trimmed a little later (gRPC frees a
  // connection's memory shortly after its descriptor).
  static constexpr std::size_t kTrimAfter = 256;
  std::size_t peak = 0;
  std::optional<std::chrono::steady_clock::time_point> trim_at;

  void forget(std::unordered_map<int, Admitted>::iterator it) {  // under mutex
    auto count = per_address.find(it->second.address);
    if (count != per_address.end() && --count->second == 0) per_address.erase(count);
    admitted.erase(it);
  }

  // Drops the connections closed since (by gRPC or by the frames listener): their descriptor is
  // gone or is another file.
  void sweep() {  // under mutex
    last_sweep = std::chrono::steady_clock::now();
    for (auto it = admitted.begin(); it != admitted.end();) {
      struct stat now {};
      const bool same = fstat(it->first, &now) == 0 && S_ISSOCK(now.st_mode) &&
                        now.st_ino == it->second.inode && now.st_dev == it->second.device;
      if (same) {
        ++it;
      } else {
        auto gone = it++;
        forget(gone);
      }
    }
    peak = std::max(peak, admitted.size());
    if (peak >= admitted.size() + kTrimAfter && admitted.size() <= peak / 2) {
      trim_at = last_sweep + std::chrono::seconds(2);
      peak = admitted.size();
    }
  }

  // Gives the heap's free memory back to the system when a trim is due (not under mutex).
  void trim_if_due() {
    {
      std::lock_guard lock(mutex);
      if (!trim_at || std::chrono::steady_clock::now() < *trim_at) return;
      trim_at.reset();
    }
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }

  std::size_t count() const {
    std::lock_guard lock(mutex);
    return admitted.size();
  }
};

struct ConnectionAdmission::State {
  ConnectionLimits limits;
  std::size_t max_connections = 0;
  Log log;
  OnRefused on_refused;
  int listen_fd = -1;
  int spare_fd = -1;  // released to accept-and-drop while the process is out of descriptors
  int wake[2] = {-1, -1};
  int port = 0;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> sink;
  HandOver hand_over;  // or this, for a server of our own
  std::thread thread;
  std::shared_ptr<ConnectionLedger> ledger = std::make_shared<ConnectionLedger>();
  std::chrono::steady_clock::time_point last_descriptor_log{};

  void refuse(int fd, ConnectionRefusal why) {
    close(fd);
    if (on_refused) on_refused(why);
  }

  void admit(int fd, const sockaddr_storage& peer) {
    struct stat socket_stat {};
    if (fstat(fd, &socket_stat) != 0) {
      close(fd);
      return;
    }
    std::string address = address_text(peer);
    {
      auto& l = *ledger;
      std::lock_guard lock(l.mutex);
      // The descriptor may be reused from a connection gRPC closed: that one is gone.
      if (auto reused = l.admitted.find(fd); reused != l.admitted.end()) l.forget(reused);
      auto over = [&] {
        if (l.admitted.size() >= max_connections) return 1;
        auto it = l.per_address.find(address);
        if (it != l.per_address.end() && it->second >= limits.max_connections_per_address) return 2;
        return 0;
      };
      int reason = over();
      // At a cap: count what gRPC has closed (at most every 20 ms, so that a flood does not
      // cost a pass over every connection per accept).
      if (reason != 0 &&
          std::chrono::steady_clock::now() - l.last_sweep > std::chrono::milliseconds(20)) {
        l.sweep();
        reason = over();
      }
      if (reason != 0) {
        refuse(fd, reason == 1 ? ConnectionRefusal::total_cap : ConnectionRefusal::address_cap);
        return;
      }
      l.admitted.emplace(
          fd, ConnectionLedger::Admitted{socket_stat.st_ino, socket_stat.st_dev, address});
      ++l.per_address[address];
      l.peak = std::max(l.peak, l.admitted.size());
    }
    if (hand_over) return hand_over(fd, address);
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters parameters;
    parameters.listener_fd = listen_fd;
    parameters.fd = fd;  // gRPC's from here on
    sink->HandleNewConnection(&parameters);
  }

  // Out of descriptors: accept with the spare one and drop the connection, so that the backlog
  // drains and the listener keeps working (gRPC 1.51's own listener stops for good here).
  void drop_one() {
    if (spare_fd >= 0) {
      close(spare_fd);
      spare_fd = -1;
    }
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      close(fd);
      if (on_refused) on_refused(ConnectionRefusal::descriptors);
    }
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    // No descriptor came free (another thread took it): wait instead of spinning on accept.
    if (fd < 0 || spare_fd < 0) poll(nullptr, 0, 50);
    const auto now = std::chrono::steady_clock::now();
    if (log && now - last_descriptor_log > std::chrono::seconds(1)) {
      last_descriptor_log = now;
      log("event=refused reason=no-descriptors open_connections=" +
          std::to_string(admitted_count()));
    }
  }

  std::size_t admitted_count() const { return ledger->count(); }

  void run() {
    pollfd watched[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
    for (;;) {
      const int ready = poll(watched, 2, 1000);
      if (watched[1].revents != 0) return;
      {
        // At most once a second, busy or not: keeps open_connections() current without
        // readers (status calls, metric scrapes) paying a pass over every connection.
        std::lock_guard lock(ledger->mutex);
        if (std::chrono::steady_clock::now() - ledger->last_sweep > std::chrono::seconds(1))
          ledger->sweep();
      }
      ledger->trim_if_due();
      if (ready <= 0) continue;
      for (int accepted = 0; accepted < 256; ++accepted) {  // then look at the wake pipe again
        sockaddr_storage peer{};
        socklen_t length = sizeof peer;
        const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          admit(fd, peer);
          continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          drop_one();
          continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // ENOBUFS, ENOMEM, …: transient; wait a little rather than spin or stop.
          if (log) log(std::string("event=accept-error error=") + log_value(std::strerror(errno)));
          poll(nullptr, 0, 10);
        }
        break;
      }
    }
  }
};

ConnectionAdmission::ConnectionAdmission(std::unique_ptr<State> state) : state_(std::move(state)) {}

ConnectionAdmission::~ConnectionAdmission() {
  stop();
  if (state_->spare_fd >= 0) close(state_->spare_fd);
  for (int fd : state_->wake)
    if (fd >= 0) close(fd);
}

Expected<std::unique_ptr<ConnectionAdmission>> ConnectionAdmission::listen(
    const std::string& address, const ConnectionLimits& limits, Log log, OnRefused on_refused,
    std::shared_ptr<ConnectionLedger> shared) {
  auto parsed = parse_listen_address(address);
  if (!parsed) return parsed.error();
  auto positive = [](const char* name, std::size_t value) -> Status {
    if (value == 0)
      return make_error(ErrorCode::not_positive, name, std::string(name) + " must be > 0");
    return {};
  };
  for (auto [name, value] :
       {std::pair{"max_connections", limits.max_connections},
        std::pair{"max_connections_per_address", limits.max_connections_per_address},
        std::pair{"max_streams_per_connection", limits.max_streams_per_connection},
        std::pair{"max_pending_streams", limits.max_pending_streams},
        std::pair{"max_pending_streams_per_address", limits.max_pending_streams_per_address}})
    CGP_RETURN_IF_ERROR(positive(name, value));
  if (limits.max_streams_per_connection > (1u << 20))
    return make_error(ErrorCode::out_of_range, "max_streams_per_connection",
                      "max_streams_per_connection must be at most 2^20");
  for (auto [name, value] : {std::pair{"handshake_timeout", limits.handshake_timeout},
                             std::pair{"idle_timeout", limits.idle_timeout},
                             std::pair{"keepalive_time", limits.keepalive_time},
                             std::pair{"keepalive_timeout", limits.keepalive_timeout}})
    if (value <= std::chrono::milliseconds(0) || value > std::chrono::hours(24 * 365))
      return make_error(ErrorCode::out_of_range, name,
                        std::string(name) + " must be between 1 ms and a year");

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(parsed->port);
  if (const int rc = getaddrinfo(parsed->host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    return listen_error("cannot resolve '" + parsed->host + "': " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);

  auto state = std::make_unique<State>();
  state->limits = limits;
  state->log = std::move(log);
  state->on_refused = std::move(on_refused);
  if (shared) state->ledger = std::move(shared);
  const std::size_t budget = descriptor_budget();
  if (budget == 0) return listen_error("no file descriptors to spare (RLIMIT_NOFILE too low)");
  state->max_connections = std::min(limits.max_connections, budget);

  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return listen_error(std::string("socket: ") + std::strerror(errno));
  state->listen_fd = fd;
  auto fail = [&](const std::string& message) {
    close(fd);
    return listen_error(message);
  };
  const int on = 1, off = 0;
  // SO_REUSEADDR lets a restarted coordinator bind while old connections linger in TIME_WAIT;
  // unlike SO_REUSEPORT it does not let two live listeners share the port.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (found->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    const int error = errno;
    close(fd);
    return make_error(
        ErrorCode::unavailable, "listen",
        "cannot listen on " + address +
            (error == EADDRINUSE ? std::string(": the address is in use (another coordinator?)")
                                 : std::string(": ") + std::strerror(error)));
  }
  if (::listen(fd, 4096) != 0) return fail(std::string("listen: ") + std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  state->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                        : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  state->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (pipe2(state->wake, O_CLOEXEC) != 0) {
    if (state->spare_fd >= 0) close(state->spare_fd);
    return fail(std::string("pipe: ") + std::strerror(errno));
  }
  return std::unique_ptr<ConnectionAdmission>(new ConnectionAdmission(std::move(state)));
}

void ConnectionAdmission::start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> sink) {
  state_->sink = std::move(sink);
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

void ConnectionAdmission::start(HandOver hand_over) {
  state_->hand_over = std::move(hand_over);
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

void ConnectionAdmission::stop() {
  if (state_->thread.joinable()) {
    const char byte = 0;
    [[maybe_unused]] const auto written = write(state_->wake[1], &byte, 1);
    state_->thread.join();
  }
  if (state_->listen_fd >= 0) {
    close(state_->listen_fd);
    state_->listen_fd = -1;
  }
}

int ConnectionAdmission::port() const noexcept {
  return state_->port;
}

std::size_t ConnectionAdmission::max_connections() const noexcept {
  return state_->max_connections;
}

std::size_t ConnectionAdmission::open_connections() const {
  return state_->admitted_count();
}

std::shared_ptr<ConnectionLedger> ConnectionAdmission::ledger() const {
  return state_->ledger;
}

}  // namespace cgp::transport::detail

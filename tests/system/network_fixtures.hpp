// Shared pieces of the network tests: device ids, swarm members, devices served from threads
// (optionally slow), and bounded waiting.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/gateway.hpp"

extern char** environ;

namespace cgp::test {

// Starts a program (argv[0] is its path) with this process's environment; its pid.
inline pid_t spawn_program(const std::vector<std::string>& arguments) {
  std::vector<char*> argv;
  for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

// A loopback port nobody uses now (for programs that take a port, not port 0), below the
// kernel's ephemeral range (32768-60999 here): a port from that range may be taken as the
// local port of some outgoing connection before the program binds it. Two tests running at
// once (ctest -j) draw at random from 12,768 ports.
inline int free_port() {
  static std::atomic<unsigned> calls{0};
  std::minstd_rand draw(static_cast<unsigned>(::getpid()) * 7919u + calls++);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = 20000 + static_cast<int>(draw() % 12768);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (bound) return port;
  }
  FAIL("no free loopback port in 20000-32767");
  return 0;
}

// A throwaway self-signed certificate for localhost / 127.0.0.1 (or the names given, as an
// openssl subjectAltName list), made with openssl at test time.
struct ThrowawayCertificate {
  std::string certificate, key;
  explicit ThrowawayCertificate(
      const std::string& subject_alt_names = "DNS:localhost,IP:127.0.0.1") {
    const auto dir =
        std::filesystem::temp_directory_path() / ("cgp-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string command =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
        "-addext subjectAltName=" +
        subject_alt_names + " -keyout " + (dir / "key.pem").string() + " -out " +
        (dir / "cert.pem").string() + " >/dev/null 2>&1";
    REQUIRE(std::system(command.c_str()) == 0);
    auto slurp = [](const std::filesystem::path& p) {
      std::ifstream in(p);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    certificate = slurp(dir / "cert.pem");
    key = slurp(dir / "key.pem");
    std::filesystem::remove_all(dir);
  }
};

// "device-0" .. "device-(n-1)": user i is device-i.
// serve_device for a device opened with simulation randomness (tests only: the link refuses
// such a device unless told it is a test).
inline Status serve_simulated_device(link::DeviceConnection connection, client::Device& device) {
  connection.allow_simulation_randomness = true;
  return link::serve_device(connection, device);
}

inline std::vector<std::string> device_ids(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("device-" + std::to_string(i));
  return out;
}

// A gateway serving TLS with `tls`, whose devices device-0 .. device-(n-1) hold the credentials
// key-0 .. key-(n-1), as phones would connect.
inline transport::GatewayOptions tls_gateway_options(const ThrowawayCertificate& tls,
                                                     std::size_t n) {
  transport::GatewayOptions options;
  options.tls_certificate_chain = tls.certificate;
  options.tls_private_key = tls.key;
  for (std::size_t i = 0; i < n; ++i)
    options.device_credentials["device-" + std::to_string(i)] = "key-" + std::to_string(i);
  return options;
}

// Swarm members device-0 .. device-(n-1) at the first n 2-D points.
inline std::vector<swarm::SwarmMember> swarm_members(const std::vector<double>& points,
                                                     std::size_t n) {
  std::vector<swarm::SwarmMember> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({"device-" + std::to_string(i), "", {points[2 * i], points[2 * i + 1]}});
  return out;
}

// Devices for rows [first, first + count) of 2-D points, built as DeviceFleet builds them
// (stream = row), the first `serve` of them serving the coordinator from a thread each; a
// positive reply_delay makes them slow. Threads end when the coordinator closes their streams,
// or at destruction (even with the coordinator still up: a failed check must not hang a test).
struct ThreadedDevices {
  std::size_t first;
  std::vector<client::Device> devices;
  std::vector<std::jthread> threads;
  ThreadedDevices(const DeviceConfig& config, const std::vector<double>& points, std::uint64_t seed,
                  const std::string& address, std::size_t first_row, std::size_t count,
                  std::size_t serve,
                  std::chrono::milliseconds reply_delay = std::chrono::milliseconds(0))
      : first(first_row) {
    devices.reserve(count);
    for (std::size_t i = first; i < first + count; ++i) {
      devices.push_back(client::Device::open_for_simulation(config, seed, i));
      REQUIRE(devices.back().register_component("location", 2).ok());
      REQUIRE(devices.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
    }
    for (std::size_t k = 0; k < serve; ++k)
      threads.emplace_back([this, k, address, reply_delay](std::stop_token stop) {
        link::DeviceConnection connection{
            address, "device-" + std::to_string(first + k), "", "", reply_delay, stop};
        (void)serve_simulated_device(connection, devices[k]);
      });
  }
  double spent(std::size_t row) const { return devices[row - first].spent(); }
};

// A gateway on a free loopback port with devices 0..fast-1 in an async swarm and devices
// fast..fast+slow-1 served from threads, answering each request after `slow_delay`; all
// connected before the constructor returns.
struct MixedFleet {
  std::unique_ptr<transport::DeviceGateway> gateway;
  std::string address;
  std::unique_ptr<swarm::DeviceSwarm> swarm;
  std::optional<ThreadedDevices> slow_devices;
  std::size_t fast;
  MixedFleet(const DeviceConfig& config, const std::vector<double>& points, std::uint64_t seed,
             std::size_t fast_count, std::size_t slow_count, std::chrono::milliseconds slow_delay)
      : gateway(*transport::DeviceGateway::start("127.0.0.1:0")),
        address("127.0.0.1:" + std::to_string(gateway->port())),
        fast(fast_count) {
    swarm::SwarmOptions options;
    options.coordinator_address = address;
    options.config = config;
    options.seed = seed;
    swarm = *swarm::DeviceSwarm::start(options, swarm_members(points, fast));
    slow_devices.emplace(config, points, seed, address, fast, slow_count, slow_count, slow_delay);
    REQUIRE(gateway->wait_for_devices(fast + slow_count, std::chrono::seconds(30)));
  }
  // Streams end before the gateway: the slow devices stop, then the swarm.
  ~MixedFleet() {
    slow_devices.reset();
    swarm.reset();
  }
  double spent(std::size_t i) const { return i < fast ? swarm->spent(i) : slow_devices->spent(i); }
};

// Polls `done` every 5 ms until it holds or `timeout` passes.
template <class Predicate>
bool eventually(Predicate&& done,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The body of GET `path` from 127.0.0.1:`port` over HTTP/1.0 ("" when it fails); a stalled
// server fails the test after 30 s instead of hanging it.
inline std::string http_get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval wait{30, 0};  // a stalled server fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = inet_addr("127.0.0.1");
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = recv(fd, buffer, sizeof buffer, 0)) > 0;)
    response.append(buffer, static_cast<std::size_t>(got));
  close(fd);
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// Device i of a sharded fleet ("device-i", credential "key-i") dialling its virtual shard's
// name s{shard}.devices.test (of `shards`) at 127.0.0.1:port, trusting `root`.
inline link::DeviceConnection shard_device_connection(int port, std::size_t i, std::uint32_t shards,
                                                      const std::string& root) {
  link::DeviceConnection connection;
  connection.coordinator_address = "s{shard}.devices.test:" + std::to_string(port);
  connection.virtual_shards = shards;
  connection.connect_to = "127.0.0.1:" + std::to_string(port);
  connection.device_id = "device-" + std::to_string(i);
  connection.credential = "key-" + std::to_string(i);
  connection.tls_root_certificate = root;
  return connection;
}

}  // namespace cgp::test

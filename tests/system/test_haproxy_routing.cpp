// HAProxy in front of the live tier (cgp/cluster/haproxy.hpp, docs/cluster.md): devices dial
// their virtual shard's name; HAProxy, in TCP mode with TLS left to the gateways, sends each
// to the gateway that owns its shard by the name in its TLS hello (SNI), on both device
// transports; a shard moved with one admin-socket command sends its devices' next connection
// to the new owner without a reload; names of no shard and bytes that are not TLS are refused.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cgp/cluster/haproxy.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kRoutedShards = 64;
constexpr std::size_t kRoutedDevices = 12;
const std::string kTemplateHost = "s{shard}.devices.test";

// HAProxy with a configuration of the test's own, in the foreground (-db), killed at the end.
class ScratchHaproxy {
 public:
  ScratchHaproxy(const std::string& config_text, const std::string& folder) {
    const std::string config = folder + "/haproxy.cfg";
    std::ofstream(config) << config_text;
    std::vector<std::string> args{CGP_HAPROXY_PATH, "-f", config, "-db", "-q"};
    pid_ = test::spawn_program(args);
  }
  ~ScratchHaproxy() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

 private:
  pid_t pid_;
};

std::uint32_t shard_of(std::size_t device) {
  return protocol::virtual_shard("device-" + std::to_string(device), kRoutedShards);
}

}  // namespace

TEST_CASE("haproxy routing: devices reach their shard's gateway and follow a moved shard",
          "[transport][cluster][haproxy]") {
  const test::ThrowawayCertificate tls("DNS:*.devices.test");
  const auto folder =
      std::filesystem::temp_directory_path() / ("cgp-haproxy-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);

  // Two gateways, each with a gRPC and a frames device port; every device may use either.
  std::vector<std::unique_ptr<transport::DeviceGateway>> gateways;
  std::vector<cluster::HaproxyGateway> backends;
  for (int g = 0; g < 2; ++g) {
    auto options = test::tls_gateway_options(tls, kRoutedDevices);
    options.frames_address = "127.0.0.1:0";
    gateways.push_back(*transport::DeviceGateway::start(options));
    backends.push_back({"gw-" + std::to_string(g),
                        "127.0.0.1:" + std::to_string(gateways.back()->port()),
                        "127.0.0.1:" + std::to_string(gateways.back()->frames_port())});
  }
  // Shard s lives on gateway s % 2.
  std::vector<cluster::ShardOwner> owners;
  for (std::uint32_t s = 0; s < kRoutedShards; ++s)
    owners.push_back({s, "gw-" + std::to_string(s % 2), 1});
  const int grpc_port = test::free_port(), frames_port = test::free_port();
  cluster::HaproxySettings settings;
  settings.grpc_listen = "127.0.0.1:" + std::to_string(grpc_port);
  settings.frames_listen = "127.0.0.1:" + std::to_string(frames_port);
  settings.admin_socket = (folder / "admin.sock").string();
  settings.map_path = (folder / "shards.map").string();
  settings.address_template = kTemplateHost + ":443";
  settings.max_connections = 1000;
  std::ofstream(settings.map_path) << *cluster::haproxy_map(settings.address_template, owners);
  const auto config = cluster::haproxy_config(settings, backends);
  REQUIRE(config);
  ScratchHaproxy haproxy(*config, folder.string());
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (!cluster::haproxy_command(settings.admin_socket, "show info") &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(50ms);
  REQUIRE(cluster::haproxy_command(settings.admin_socket, "show info"));

  const auto connection = [&](std::size_t i) {
    link::DeviceConnection c;
    const bool frames = i % 2 == 0;  // even devices on frames, odd ones on gRPC
    const int port = frames ? frames_port : grpc_port;
    c.coordinator_address = kTemplateHost + ":" + std::to_string(port);
    c.virtual_shards = kRoutedShards;
    c.connect_to = "127.0.0.1:" + std::to_string(port);
    c.device_id = "device-" + std::to_string(i);
    c.credential = "key-" + std::to_string(i);
    c.tls_root_certificate = tls.certificate;
    c.transport = frames ? link::DeviceTransport::frames : link::DeviceTransport::grpc;
    c.allow_simulation_randomness = true;
    return c;
  };
  const auto config_device = *DeviceConfig::cgp(1.0);
  std::vector<client::Device> devices;
  for (std::size_t i = 0; i < kRoutedDevices; ++i)
    devices.push_back(client::Device::open_for_simulation(config_device, 30, i));
  std::vector<std::jthread> serving(kRoutedDevices);
  const auto serve = [&](std::size_t i) {
    serving[i] = std::jthread([&, i](std::stop_token stop) {
      auto c = connection(i);
      c.stop = stop;
      (void)link::serve_device_reconnecting(c, devices[i]);
    });
  };
  std::size_t expected[2] = {0, 0};
  for (std::size_t i = 0; i < kRoutedDevices; ++i) {
    ++expected[shard_of(i) % 2];
    serve(i);
  }
  INFO("gw-0 should hold " << expected[0] << ", gw-1 " << expected[1]);
  CHECK(gateways[0]->wait_for_devices(expected[0], 30s));
  CHECK(gateways[1]->wait_for_devices(expected[1], 30s));
  std::this_thread::sleep_for(300ms);  // no device lands where it does not belong
  CHECK(gateways[0]->connected() == expected[0]);
  CHECK(gateways[1]->connected() == expected[1]);

  // Device 0's shard moves to the other gateway: its next connection goes there.
  const std::uint32_t moved = shard_of(0);
  const int from = static_cast<int>(moved % 2), to = 1 - from;
  std::size_t in_moved = 0;
  for (std::size_t i = 0; i < kRoutedDevices; ++i) in_moved += shard_of(i) == moved ? 1 : 0;
  REQUIRE(cluster::haproxy_route_shard(settings.admin_socket, settings.map_path,
                                       settings.address_template, moved,
                                       "gw-" + std::to_string(to)));
  for (std::size_t i = 0; i < kRoutedDevices; ++i)
    if (shard_of(i) == moved) {
      serving[i] = {};  // stops and joins: the device hangs up
      serve(i);         // and dials again
    }
  CHECK(gateways[static_cast<std::size_t>(to)]->wait_for_devices(expected[to] + in_moved, 30s));
  const auto settle = std::chrono::steady_clock::now() + 20s;
  while (gateways[static_cast<std::size_t>(from)]->connected() != expected[from] - in_moved &&
         std::chrono::steady_clock::now() < settle)
    std::this_thread::sleep_for(20ms);
  CHECK(gateways[static_cast<std::size_t>(from)]->connected() == expected[from] - in_moved);

  // A name of no shard, and bytes that are not TLS, reach no gateway.
  // s99999 is a name the certificate covers but no shard has: HAProxy must refuse it.
  auto stranger = connection(1);
  stranger.coordinator_address = "s99999.devices.test:" + std::to_string(frames_port);
  stranger.virtual_shards = 0;
  stranger.transport = link::DeviceTransport::frames;
  stranger.connect_to = "127.0.0.1:" + std::to_string(frames_port);
  auto lost_device = client::Device::open_for_simulation(config_device, 30, 99);
  CHECK_FALSE(link::serve_device(stranger, lost_device).ok());
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(frames_port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    const std::string junk = "GET / HTTP/1.0\r\n\r\n";
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    char byte;
    const ssize_t got = ::recv(fd, &byte, 1, 0);
    CHECK(got == 0);  // closed by HAProxy, nothing answered (not a timeout: that is -1)
    ::close(fd);
  }
  CHECK(gateways[0]->connected() + gateways[1]->connected() == kRoutedDevices);
  for (auto& t : serving) t = {};
  std::filesystem::remove_all(folder);
}

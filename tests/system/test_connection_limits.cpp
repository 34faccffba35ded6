// Floods of connections and of streams that never say Hello. On 51cfbc1 a
// flood of idle connections used up the coordinator's descriptors and gRPC's listener stopped
// for good ("Failed accept4: Too many open files"); idle connections were held for minutes; and
// every silent stream held ~17 KB without limit. Each test here floods, then checks that a
// legitimate device and analyst still get in, with the flood still open on the attacker's side.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../../transport/src/connection_admission.hpp"
#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "network_fixtures.hpp"
#include "support/idle_flood.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

// True once the server has closed the connection (EOF or reset), waiting up to `timeout`.
// Whatever the server sent first (gRPC's HTTP/2 settings) is read past.
bool closed_by_server(int fd, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char bytes[4096];
    const auto got = recv(fd, bytes, sizeof bytes, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
  }
}

swarm::SwarmOptions one_device(const std::string& address) {
  swarm::SwarmOptions options;
  options.coordinator_address = address;
  options.config = *DeviceConfig::cgp(1.0);
  options.seed = 1;
  return options;
}

bool status_ok(const std::string& address) {
  auto analyst = analyst::AnalystClient::connect({address, "", "", 2s, std::nullopt, std::nullopt});
  return analyst && analyst->status().has_value();
}

}  // namespace

TEST_CASE("connections: caps per address and in all and a flood is cut at the handshake timeout",
          "[transport][limits]") {
  transport::CoordinatorOptions options;
  options.device_ids = {"legit"};
  options.gateway.limits.max_connections = 40;
  options.gateway.limits.max_connections_per_address = 10;
  options.gateway.limits.handshake_timeout = 3000ms;
  auto service = *transport::CoordinatorService::start(options);
  const int port = service->port();
  CHECK(service->gateway().max_connections() == 40);

  test::Flood flood;
  flood.open("127.0.0.2", port, 15);  // 5 over the per-address cap
  for (const char* source : {"127.0.0.3", "127.0.0.4", "127.0.0.5"}) flood.open(source, port, 10);
  // 40 admitted now: the total cap. 5 more from a fresh address are refused all the same.
  flood.open("127.0.0.6", port, 5);
  REQUIRE(test::eventually(
      [&] {
        const auto c = service->gateway().counters();
        return c.refused_address_cap == 5 && c.refused_total_cap == 5;
      },
      10s));
  CHECK(service->gateway().counters().open_connections <= 40);

  // The flood stays open on the attacker's side; the gateway cuts it at the handshake timeout,
  // and a device and an analyst get in (the device redials with backoff while the cap holds).
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto swarm = *swarm::DeviceSwarm::start(one_device(address), {{"legit", "", {1, 2}}});
  CHECK(service->gateway().wait_for_devices(1, 30s));
  CHECK(test::eventually([&] { return status_ok(address); }, 30s));
  for (int fd : flood.fds) CHECK(closed_by_server(fd, 10s));
  CHECK(test::eventually([&] { return service->gateway().counters().open_connections <= 3; }, 10s));
  swarm.reset();
}

TEST_CASE("connections: streams that never say Hello are capped per address and in all",
          "[transport][limits]") {
  transport::GatewayOptions options;
  options.hello_timeout = 5000ms;  // long enough that none expires while 20 streams open
  options.limits.max_pending_streams = 12;
  options.limits.max_pending_streams_per_address = 8;
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::DeviceGateway::NewStub(channel);
  constexpr int kSilent = 20;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<
      std::unique_ptr<grpc::ClientReaderWriter<v1::DeviceToCoordinator, v1::CoordinatorToDevice>>>
      streams;
  for (int i = 0; i < kSilent; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + 30s);
    streams.push_back(stub->Connect(contexts.back().get()));
  }
  // One address: 8 wait for their Hello, the other 12 are ended at once.
  REQUIRE(test::eventually([&] { return gateway->counters().refused_pending_streams == 12; }, 10s));
  int exhausted = 0, timed_out = 0;
  for (auto& stream : streams) {
    v1::CoordinatorToDevice ignored;
    while (stream->Read(&ignored)) {
    }
    const auto code = stream->Finish().error_code();
    exhausted += code == grpc::StatusCode::RESOURCE_EXHAUSTED ? 1 : 0;
    timed_out += code == grpc::StatusCode::DEADLINE_EXCEEDED ? 1 : 0;
  }
  CHECK(exhausted == 12);
  CHECK(timed_out == 8);  // the hello timeout ended the pending ones

  // The pending slots are free again: a device gets in.
  auto swarm = *swarm::DeviceSwarm::start(one_device(address), {{"legit", "", {1, 2}}});
  CHECK(gateway->wait_for_devices(1, 30s));
  swarm.reset();
}

TEST_CASE("connections: the listen address is checked by name", "[transport][limits]") {
  using transport::detail::parse_listen_address;
  CHECK(parse_listen_address("127.0.0.1:0")->port == 0);
  CHECK(parse_listen_address("[::1]:7070")->host == "::1");
  CHECK(parse_listen_address("0.0.0.0:65535")->port == 65535);
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:", "127.0.0.1", ":7070", "[::1]7070",
                          "::1:7070", "127.0.0.1:-1", "127.0.0.1:12a"}) {
    INFO(bad);
    auto parsed = parse_listen_address(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().parameter == "listen");
  }
  transport::GatewayOptions options;
  options.address = "127.0.0.1:99999";  // gRPC listened on another port instead
  auto refused = transport::DeviceGateway::start(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().parameter == "listen");
  options.address = "127.0.0.1:0";
  options.limits.max_connections = 0;
  refused = transport::DeviceGateway::start(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().parameter == "max_connections");
  CHECK(transport::detail::peer_address("ipv4:10.1.2.3:5555") == "10.1.2.3");
  CHECK(transport::detail::peer_address("ipv6:[::1]:5555") == "::1");
  CHECK(transport::detail::peer_address("ipv6:%5B::1%5D:5555") == "::1");
}

#ifdef CGP_COORDINATOR_PATH
TEST_CASE("connections: a coordinator with 256 descriptors survives floods twice its limit",
          "[transport][limits]") {
  // The real program under a low RLIMIT_NOFILE: its descriptor budget (256 − 128) caps the
  // connections, so accept never runs out; on 51cfbc1 gRPC's listener died at EMFILE.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cgp-limits-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string tool = CGP_COORDINATOR_PATH;
  auto run = [&](std::vector<std::string> arguments, const rlimit* files) {
    arguments.insert(arguments.begin(), tool);
    const pid_t pid = fork();
    if (pid == 0) {
      if (files) setrlimit(RLIMIT_NOFILE, files);
      std::vector<char*> argv;
      for (auto& a : arguments) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  };
  auto wait_exit = [](pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  REQUIRE(wait_exit(run({"credential", "--out", (dir / "analyst").string()}, nullptr)) == 0);
  REQUIRE(wait_exit(run({"enrol", "--devices", (dir / "devices.csv").string(), "--id", "d0",
                         "--credential-out", (dir / "d0.key").string()},
                        nullptr)) == 0);
  std::string secret;
  std::getline(std::ifstream(dir / "analyst"), secret);

  // A free port, then the coordinator on it.
  int port = 0;
  {
    const int probe = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = inet_addr("127.0.0.1");
    REQUIRE(bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
    socklen_t length = sizeof any;
    getsockname(probe, reinterpret_cast<sockaddr*>(&any), &length);
    port = ntohs(any.sin_port);
    close(probe);
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const rlimit files{256, 256};
  const pid_t coordinator =
      run({"serve", "--listen", address, "--devices", (dir / "devices.csv").string(),
           "--analyst-credential", (dir / "analyst").string(), "--quiet", "--handshake-timeout-ms",
           "1000"},
          &files);
  auto analyst_in = [&] {
    auto analyst =
        analyst::AnalystClient::connect({address, secret, "", 2s, std::nullopt, std::nullopt});
    return analyst && analyst->status().has_value();
  };
  REQUIRE(test::eventually(analyst_in, 30s));
  for (int burst = 0; burst < 2; ++burst) {
    INFO("burst " << burst);
    {
      test::Flood flood;  // 600 idle connections, held open: more than twice the process's limit
      for (const char* source : {"127.0.0.2", "127.0.0.3", "127.0.0.4"})
        flood.open(source, port, 200);
      CHECK(test::eventually(analyst_in, 30s));
      int status = 0;
      CHECK(waitpid(coordinator, &status, WNOHANG) == 0);  // still running
    }
    CHECK(test::eventually(analyst_in, 30s));
  }
  kill(coordinator, SIGTERM);
  CHECK(wait_exit(coordinator) == 0);
  fs::remove_all(dir);
}
#endif

TEST_CASE("connections: TLS material that is not a certificate and its key is refused at start",
          "[transport][limits]") {
  // Garbage PEM started a coordinator that logged tls=on while every client
  // hung in its handshake (it used to exit 1).
  const test::ThrowawayCertificate one, other;
  struct Case {
    const char* what;
    std::string chain, key;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"garbage", "not a certificate\n", "not a key\n", "no PEM certificate"},
      {"a key for a certificate", one.key, one.key, "no PEM certificate"},
      {"a certificate for a key", one.certificate, one.certificate, "not a PEM private key"},
      {"another certificate's key", one.certificate, other.key, "does not belong"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    transport::GatewayOptions options;
    options.tls_certificate_chain = c.chain;
    options.tls_private_key = c.key;
    auto refused = transport::DeviceGateway::start(options);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == "tls");
    CHECK(refused.error().message.find(c.says) != std::string::npos);
    transport::CoordinatorOptions service;
    service.device_ids = {"d0"};
    service.analyst_address = "127.0.0.1:0";
    service.gateway.tls_certificate_chain = c.chain;
    service.gateway.tls_private_key = c.key;
    auto no_service = transport::CoordinatorService::start(service);
    REQUIRE_FALSE(no_service.has_value());
    CHECK(no_service.error().parameter == "tls");
  }
  transport::GatewayOptions good;
  good.tls_certificate_chain = one.certificate;
  good.tls_private_key = one.key;
  CHECK(transport::DeviceGateway::start(good).has_value());
}

// What operators expect of a gRPC service: the standard health protocol and
// server reflection without a credential, a Prometheus /metrics endpoint on its own port,
// --version on every program and Hello.sdk_version in the log, gRPC's own log lines in the
// structured log, and a config file equivalent to the flags.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/version.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "network_fixtures.hpp"
#include "support/idle_flood.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using test::http_get;

// One request over server reflection as grpcurl makes it: the bidirectional call at `method`
// (/grpc.reflection.v1.ServerReflection/ServerReflectionInfo, or v1alpha's), made with gRPC's
// generic stub; its one response.
template <class Response, class Request>
Response reflect(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                 const Request& request) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  auto call = stub.PrepareCall(&context, method, &queue);
  auto step = [&](int tag) {
    void* got = nullptr;
    bool ok = false;
    return queue.Next(&got, &ok) &&
           got == reinterpret_cast<void*>(static_cast<std::intptr_t>(tag)) && ok;
  };
  auto tag = [](int n) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(n)); };
  call->StartCall(tag(1));
  REQUIRE(step(1));
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer outgoing(&slice, 1);
  call->Write(outgoing, tag(2));
  REQUIRE(step(2));
  call->WritesDone(tag(3));
  REQUIRE(step(3));
  grpc::ByteBuffer incoming;
  call->Read(&incoming, tag(4));
  REQUIRE(step(4));
  std::vector<grpc::Slice> slices;
  REQUIRE(incoming.Dump(&slices).ok());
  std::string received;
  for (const auto& s : slices) received.append(reinterpret_cast<const char*>(s.begin()), s.size());
  Response response;
  REQUIRE(response.ParseFromString(received));
  grpc::Status status;
  call->Finish(&status, tag(5));
  REQUIRE(step(5));
  CHECK(status.ok());
  queue.Shutdown();
  void* ignored;
  bool ok;
  while (queue.Next(&ignored, &ok)) {
  }
  return response;
}

// Lists the services by server reflection v1alpha, as `grpcurl list` did before v1.
std::vector<std::string> reflected_services(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  const auto response = reflect<grpc::reflection::v1alpha::ServerReflectionResponse>(
      channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", request);
  std::vector<std::string> names;
  for (const auto& each : response.list_services_response().service()) names.push_back(each.name());
  return names;
}

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream lines(text);
  for (std::string each; std::getline(lines, each);)
    if (each == line) return true;
  return false;
}

}  // namespace

TEST_CASE("operations: health checks and reflection need no credential and /metrics counts",
          "[transport][operations]") {
  transport::CoordinatorOptions options;
  options.device_ids = {"d0", "d1"};
  options.metrics_address = "127.0.0.1:0";
  options.analyst_credential_sha256 = transport::sha256_of("secret");
  std::mutex log_mutex;
  std::vector<std::string> log;
  options.gateway.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log.push_back(line);
  };
  auto service = *transport::CoordinatorService::start(options);
  REQUIRE(service->metrics_port() > 0);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  auto swarm =
      *swarm::DeviceSwarm::start(swarm_options, {{"d0", "", {1, 1}}, {"d1", "", {50, 50}}});
  REQUIRE(service->gateway().wait_for_devices(2, 30s));

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  {  // grpc.health.v1, no credential
    auto health = grpc::health::v1::Health::NewStub(channel);
    for (const char* name : {"", "cgp.v1.Analyst", "cgp.v1.DeviceGateway"}) {
      INFO("service '" << name << "'");
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + 10s);
      grpc::health::v1::HealthCheckRequest request;
      request.set_service(name);
      grpc::health::v1::HealthCheckResponse response;
      REQUIRE(health->Check(&context, request, &response).ok());
      CHECK(response.status() == grpc::health::v1::HealthCheckResponse::SERVING);
    }
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("no.such.Service");
    grpc::health::v1::HealthCheckResponse response;
    CHECK(health->Check(&context, request, &response).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  {  // server reflection: what grpcurl's "list" asks
    const auto names = reflected_services(channel);
    CHECK(std::count(names.begin(), names.end(), "cgp.v1.Analyst") == 1);
    CHECK(std::count(names.begin(), names.end(), "cgp.v1.DeviceGateway") == 1);
    CHECK(std::count(names.begin(), names.end(), "grpc.health.v1.Health") == 1);
    CHECK(std::count(names.begin(), names.end(), "grpc.reflection.v1.ServerReflection") == 1);
    CHECK(std::count(names.begin(), names.end(), "grpc.reflection.v1alpha.ServerReflection") == 1);
  }

  auto analyst =
      *analyst::AnalystClient::connect({address, "secret", "", 30s, std::nullopt, std::nullopt});
  double lo[2] = {0, 0}, hi[2] = {10, 10};
  coordinator::QueryOptions query;
  query.query_id = "";
  REQUIRE(analyst
              .range_count(*geometry::Box::create(lo, hi),
                           analyst::RemoteCharges::fixed(coordinator::Charge{0.5}), query)
              .has_value());

  const std::string metrics = http_get(service->metrics_port(), "/metrics");
  INFO(metrics);
  CHECK(has_line(metrics, "cgp_devices_connected 2"));
  CHECK(has_line(metrics, "cgp_devices_enrolled 2"));
  CHECK(has_line(metrics, "cgp_device_connects_total 2"));
  CHECK(has_line(metrics, "cgp_queries_total{kind=\"range\",outcome=\"valid\"} 1"));
  CHECK(has_line(metrics, "cgp_query_duration_seconds_count{kind=\"range\"} 1"));
  CHECK(metrics.find("cgp_rounds_total ") != std::string::npos);
  CHECK(metrics.find("cgp_unanswered_total 0") != std::string::npos);
  CHECK(metrics.find("cgp_connections_open ") != std::string::npos);
  CHECK(metrics.find("cgp_refused_total{reason=\"address_cap\"} 0") != std::string::npos);

  // Hello.sdk_version is filled by our clients and logged with the connect.
  {
    std::lock_guard lock(log_mutex);
    const std::string expected = "sdk=" + std::string(version_string());
    CHECK(std::count_if(log.begin(), log.end(), [&](const std::string& line) {
            return line.find("event=connect") != std::string::npos &&
                   line.find(expected) != std::string::npos;
          }) == 2);
  }
  // A second endpoint on the same metrics port is refused by name.
  options.gateway.log = nullptr;
  options.metrics_address = "127.0.0.1:" + std::to_string(service->metrics_port());
  auto second = transport::CoordinatorService::start(options);
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().parameter == "metrics_listen");
  swarm.reset();
}

TEST_CASE("operations: versions and a config file for the flags and gRPC lines in the log",
          "[transport][operations]") {
  for (const char* program :
       {CGP_COORDINATOR_PATH, CGP_ANALYST_PATH, CGP_DEVICE_PATH, CGP_SWARM_PATH, CGP_SIM_PATH}) {
    INFO(program);
    const std::string command = std::string(program) + " --version";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe);
    char line[128] = {};
    REQUIRE(std::fgets(line, sizeof line, pipe));
    CHECK(pclose(pipe) == 0);
    CHECK(std::string(line) == std::string(version_string()) + "\n");
  }

  // --help shows defaults and units.
  {
    const std::string command = std::string(CGP_COORDINATOR_PATH) + " serve --help";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe);
    std::string help;
    char chunk[512];
    while (std::fgets(chunk, sizeof chunk, pipe)) help += chunk;
    CHECK(pclose(pipe) == 0);
    CHECK(help.find("--budget FLOAT=1") != std::string::npos);
    CHECK(help.find("rho per m^2") != std::string::npos);
    CHECK(help.find("=20000") != std::string::npos);  // --max-connections
    CHECK(help.find("--handshake-timeout-ms") != std::string::npos);
  }

  const fs::path dir = fs::temp_directory_path() / ("cgp-ops-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string coordinator = CGP_COORDINATOR_PATH;
  auto quietly = [](std::string command) {
    return std::system((command + " >/dev/null 2>&1").c_str());
  };
  REQUIRE(quietly(coordinator + " credential --out " + (dir / "analyst").string()) == 0);
  REQUIRE(quietly(coordinator + " enrol --devices " + (dir / "devices.csv").string() +
                  " --id d0 --credential-out " + (dir / "d0.key").string()) == 0);
  REQUIRE(quietly("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                  "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                  (dir / "key.pem").string() + " -out " + (dir / "cert.pem").string()) == 0);
  int port = 0;
  {
    auto probe = transport::DeviceGateway::start("127.0.0.1:0");
    REQUIRE(probe.has_value());
    port = (*probe)->port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  // Everything serve needs from the file: nothing but --config on the command line.
  {
    std::ofstream config(dir / "coordinator.toml");
    config << "[serve]\n"
           << "listen = \"" << address << "\"\n"
           << "devices = \"" << (dir / "devices.csv").string() << "\"\n"
           << "analyst-credential = \"" << (dir / "analyst").string() << "\"\n"
           << "tls-cert = \"" << (dir / "cert.pem").string() << "\"\n"
           << "tls-key = \"" << (dir / "key.pem").string() << "\"\n"
           << "handshake-timeout-ms = 2000\n";
  }
  std::vector<std::string> arguments = {coordinator, "--config",
                                        (dir / "coordinator.toml").string(), "serve"};
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string err_file = (dir / "stderr.txt").string();
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  pid_t server = 0;
  REQUIRE(posix_spawn(&server, argv[0], &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);

  std::string secret, root;
  std::getline(std::ifstream(dir / "analyst"), secret);
  {
    std::ifstream in(dir / "cert.pem");
    root.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bool up = false;
  for (int attempt = 0; attempt < 100 && !up; ++attempt) {
    auto analyst = analyst::AnalystClient::connect(
        {"localhost:" + std::to_string(port), secret, root, 2s, std::nullopt, std::nullopt});
    up = analyst && analyst->status().has_value();
    if (!up) std::this_thread::sleep_for(100ms);
  }
  CHECK(up);  // the TLS coordinator the config file describes
  // Plaintext bytes at a TLS port: gRPC logs the failed handshake, through our log.
  {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = inet_addr("127.0.0.1");
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(send(fd, garbage, sizeof garbage - 1, MSG_NOSIGNAL) > 0);
    char buffer[256];
    while (recv(fd, buffer, sizeof buffer, 0) > 0) {
    }
    close(fd);
  }
  std::this_thread::sleep_for(300ms);
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::ifstream err(err_file);
  std::size_t lines = 0, grpc_lines = 0;
  for (std::string line; std::getline(err, line);) {
    INFO(line);
    ++lines;
    CHECK(line.rfind("ts=", 0) == 0);  // every line is a structured log line
    grpc_lines += line.find(" event=grpc ") != std::string::npos ? 1 : 0;
  }
  CHECK(lines >= 3);  // listening, the handshake failure, stopping
  CHECK(grpc_lines >= 1);
  fs::remove_all(dir);
}

TEST_CASE("operations: a coordinator that cannot be reached is unavailable and not bad input",
          "[transport][operations]") {
  // Network failures came back as invalid_argument, which tells a caller to
  // fix its input instead of retrying.
  int port = 0;
  {
    auto probe = transport::DeviceGateway::start("127.0.0.1:0");
    REQUIRE(probe.has_value());
    port = (*probe)->port();
  }  // nobody listens there now
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 2s, std::nullopt, std::nullopt});
  auto status = analyst.status();
  REQUIRE_FALSE(status.has_value());
  CHECK((status.error().code == ErrorCode::unavailable ||
         status.error().code == ErrorCode::deadline_exceeded));
  CHECK(status.error().parameter == "coordinator");

  // A live coordinator: a refused credential is unauthenticated, a reused id already_exists.
  transport::CoordinatorOptions options;
  options.device_ids = {"d0"};
  options.analyst_credential_sha256 = transport::sha256_of("right");
  auto service = *transport::CoordinatorService::start(options);
  const std::string live = "127.0.0.1:" + std::to_string(service->port());
  auto wrong =
      *analyst::AnalystClient::connect({live, "wrong", "", 10s, std::nullopt, std::nullopt});
  auto refused = wrong.status();
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::unauthenticated);
  CHECK(refused.error().parameter == "credential");
  auto right =
      *analyst::AnalystClient::connect({live, "right", "", 10s, std::nullopt, std::nullopt});
  auto missing = right.result("never");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().parameter == "query_id");
  // The parameter is named once in the message, not "rho[0]: rho[0]: ...".
  double lo[2] = {0, 0}, hi[2] = {1, 1};
  coordinator::QueryOptions query;
  query.beta = 2;
  auto bad = right.range_count(*geometry::Box::create(lo, hi),
                               analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == ErrorCode::out_of_range);
  CHECK(bad.error().parameter == "beta");
  CHECK(bad.error().message.rfind("beta: beta:", 0) != 0);
}

TEST_CASE("operations: /metrics answers with 200 idle sockets open on its port, and with 300",
          "[transport][operations]") {
  // Behind 200 idle sockets a scrape waited over a minute (civetweb gave each socket
  // one of its 2 worker threads until its request timeout). Served by one Asio thread now, an
  // idle socket holds no worker; past the 256-connection cap the longest-idle one makes room.
  transport::CoordinatorOptions options;
  options.device_ids = {"d-0"};
  options.metrics_address = "127.0.0.1:0";
  auto service = *transport::CoordinatorService::start(options);
  const int port = service->metrics_port();
  REQUIRE(port > 0);
  test::Flood idle;  // connections that never send a request
  idle.open("127.0.0.1", port, 200);
  CHECK(has_line(http_get(port, "/metrics"), "cgp_devices_enrolled 1"));
  CHECK(http_get(port, "/elsewhere").empty());  // 404: no body
  idle.open("127.0.0.1", port, 100);
  CHECK(has_line(http_get(port, "/metrics"), "cgp_devices_enrolled 1"));
}

TEST_CASE("operations: server reflection v1 lists the services and describes the device gateway",
          "[transport][operations][reflection]") {
  // Current grpcurl asks grpc.reflection.v1 first: it was UNIMPLEMENTED (v1alpha only). Both
  // ports serve both versions, with the same answers.
  transport::CoordinatorOptions options;
  options.device_ids = {"d0"};
  options.analyst_address = "127.0.0.1:0";
  auto service = *transport::CoordinatorService::start(options);
  using Request = grpc::reflection::v1::ServerReflectionRequest;
  using Response = grpc::reflection::v1::ServerReflectionResponse;
  const std::string method = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
  for (const int port : {service->port(), service->analyst_port()}) {
    INFO("port " << port << (port == service->port() ? " (devices)" : " (analyst)"));
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    Request list;
    list.set_list_services("");
    const auto listed = reflect<Response>(channel, method, list);
    std::vector<std::string> names;
    for (const auto& each : listed.list_services_response().service()) names.push_back(each.name());
    CHECK(std::count(names.begin(), names.end(), "grpc.health.v1.Health") == 1);
    CHECK(std::count(names.begin(), names.end(), "grpc.reflection.v1.ServerReflection") == 1);
    CHECK(std::count(names.begin(), names.end(), "grpc.reflection.v1alpha.ServerReflection") == 1);
    const char* ours = port == service->port() ? "cgp.v1.DeviceGateway" : "cgp.v1.Analyst";
    CHECK(std::count(names.begin(), names.end(), ours) == 1);
    // A service's file, as `grpcurl describe` asks, and the v1 protocol's own.
    for (const std::string symbol :
         {"cgp.v1.DeviceGateway", "grpc.reflection.v1.ServerReflection"}) {
      INFO(symbol);
      Request describe;
      describe.set_file_containing_symbol(symbol);
      const auto described = reflect<Response>(channel, method, describe);
      CHECK_FALSE(described.has_error_response());
      REQUIRE(described.file_descriptor_response().file_descriptor_proto_size() >= 1);
      google::protobuf::FileDescriptorProto file;
      REQUIRE(file.ParseFromString(described.file_descriptor_response().file_descriptor_proto(0)));
      const std::string service_name = symbol.substr(symbol.rfind('.') + 1);
      CHECK(file.package() + "." + service_name == symbol);
      CHECK(std::count_if(file.service().begin(), file.service().end(),
                          [&](const auto& s) { return s.name() == service_name; }) == 1);
    }
    Request unknown;
    unknown.set_file_containing_symbol("no.such.Symbol");
    CHECK(reflect<Response>(channel, method, unknown).error_response().error_code() ==
          static_cast<int>(grpc::StatusCode::NOT_FOUND));
  }
}

// On 3f97682 a coordinator whose device connections were all taken (300 devices, one
// connection each, --max-connections 200) refused its own operator: `cgp-analyst status` failed
// with "Socket closed", and a load balancer's health check the same way. With the analyst's own
// port (--analyst-listen) devices and floods on the device port never take its connections.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "network_fixtures.hpp"
#include "support/idle_flood.hpp"
#include "support/seed.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;

namespace {

// grpc.health.v1 Check on `address` for `service` ("" = the server), as a load balancer asks.
bool serving(const std::string& address, const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  return health->Check(&context, request, &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

int run_status(const std::string& address) {
  std::vector<std::string> arguments = {CGP_ANALYST_PATH, "--coordinator", address, "status"};
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], &quiet, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&quiet);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("analyst port: devices and floods filling the device port never lock the operator out",
          "[transport][limits]") {
  CGP_SEEDED(3501);
  const std::size_t n = 12, device_slots = 6;
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(n);
  options.gateway.limits.max_connections = device_slots;
  options.gateway.limits.max_connections_per_address = device_slots;
  options.analyst_address = "127.0.0.1:0";
  options.analyst_limits.max_connections_per_address = 8;
  options.round_deadline = 1s;
  auto service = *transport::CoordinatorService::start(options);
  const std::string devices = "127.0.0.1:" + std::to_string(service->port());
  const std::string analysts = "127.0.0.1:" + std::to_string(service->analyst_port());
  REQUIRE(service->analyst_port() != service->port());
  // The device port serves devices and its own health only.
  CHECK(serving(devices, ""));
  CHECK_FALSE(serving(devices, "cgp.v1.Analyst"));

  // Twelve devices on a connection each: six get in, the rest are refused at accept and redial.
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = devices;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  swarm_options.seed = seed;
  swarm_options.streams_per_connection = 1;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options,
                                          test::swarm_members(std::vector<double>(2 * n, 10.0), n));
  REQUIRE(test::eventually([&] {
    return service->gateway().connected() == device_slots &&
           service->gateway().counters().refused_total_cap > 0;
  }));
  // And idle connections from forty more addresses, held open.
  test::Flood flood;
  for (int host = 2; host < 42; ++host)
    for (int k = 0; k < 3; ++k) {
      const std::string source = "127.0.0." + std::to_string(host);
      const int fd = test::dial_from(source.c_str(), service->port());
      if (fd >= 0) flood.fds.push_back(fd);  // refused ones are closed by the server
    }
  REQUIRE(service->gateway().connected() == device_slots);  // the device port is full

  // The operator's three ways in, all on the analyst's port.
  CHECK(serving(analysts, ""));
  CHECK(serving(analysts, "cgp.v1.Analyst"));
  CHECK(run_status(analysts) == 0);
  auto analyst = *analyst::AnalystClient::connect(
      {analysts, "", "", 30s, /*min_coverage=*/0.0, /*max_missing_share=*/1.0});
  auto status = analyst.status();
  REQUIRE(status.has_value());
  CHECK(status->connected == device_slots);
  double lo[2] = {0, 0}, hi[2] = {20, 20};
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;
  auto counted =
      analyst.range_count(*geometry::Box::create(lo, hi),
                          analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query);
  REQUIRE(counted.has_value());
  CHECK(counted->coverage.answered >= device_slots - 1);  // a device may be mid-redial

  // The analyst port has caps of its own: one address over its share is cut, another gets in.
  test::Flood analyst_flood;
  for (int k = 0; k < 12; ++k) {
    const int fd = test::dial_from("127.0.0.50", service->analyst_port());
    if (fd >= 0) analyst_flood.fds.push_back(fd);
  }
  CHECK(run_status(analysts) == 0);
  CHECK(serving(analysts, ""));
  swarm.reset();
  service.reset();
}

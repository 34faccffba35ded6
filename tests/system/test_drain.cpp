// A stop that drains first (--drain-ms): at the first SIGTERM grpc.health.v1 says NOT_SERVING
// (Check and Watch, the server and each service) while devices, analyst calls and queries are
// served, then the coordinator stops; a second signal stops it at once. Until this, health said
// NOT_SERVING for ~3 ms before the server closed: no load balancer could see it.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "served_coordinator.hpp"

using namespace cgp;
using namespace std::chrono_literals;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

// The health of `service` by Check; UNKNOWN when the call fails.
HealthCheckResponse::ServingStatus check(grpc::health::v1::Health::Stub& health,
                                         const std::string& service) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  if (!health.Check(&context, request, &response).ok()) return HealthCheckResponse::UNKNOWN;
  return response.status();
}

}  // namespace

TEST_CASE("drain: health says NOT_SERVING while devices and analysts are served, two signals stop",
          "[transport][operations][health][drain]") {
  test::ServedCoordinator c("cgp-drain", 1);
  // The drain from the config file, as deploy/coordinator.toml sets it: the longest allowed, so
  // that only the second signal can have stopped the coordinator below.
  std::ofstream(c.path("coordinator.toml")) << "[serve]\ndrain-ms = 600000\n";
  c.serve({}, {"--config", c.path("coordinator.toml")});
  auto swarm = *swarm::DeviceSwarm::start(c.swarm_options(), c.members());
  REQUIRE(c.connected(1));

  auto channel = grpc::CreateChannel(c.address, grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  REQUIRE(check(*health, "") == HealthCheckResponse::SERVING);
  grpc::ClientContext watching;
  watching.set_deadline(std::chrono::system_clock::now() + 60s);
  HealthCheckRequest overall;
  auto watch = health->Watch(&watching, overall);
  HealthCheckResponse heard;
  REQUIRE(watch->Read(&heard));
  CHECK(heard.status() == HealthCheckResponse::SERVING);

  c.signal(SIGTERM);
  REQUIRE(watch->Read(&heard));  // the watcher hears it at once
  CHECK(heard.status() == HealthCheckResponse::NOT_SERVING);
  for (const char* service : {"", "cgp.v1.Analyst", "cgp.v1.DeviceGateway"}) {
    INFO("service '" << service << "'");
    CHECK(check(*health, service) == HealthCheckResponse::NOT_SERVING);
  }
  // Everything else is served: analyst calls, the device, a query over it.
  auto status = c.status();
  REQUIRE(status.has_value());
  CHECK(status->connected == 1);
  auto analyst = c.analyst();
  double lo[2] = {-5, -5}, hi[2] = {5, 5};
  coordinator::QueryOptions query;
  query.query_id = "while-draining";
  auto counted =
      analyst.range_count(*geometry::Box::create(lo, hi),
                          analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query);
  REQUIRE(counted.has_value());
  CHECK(counted->coverage.answered == 1);
  CHECK(c.running());
  CHECK(c.log().find("event=draining signal=15 drain_ms=600000") != std::string::npos);

  // The second signal stops it at once (well within the 10-minute drain).
  c.signal(SIGTERM);
  CHECK(c.wait_exit(60s) == 0);
  CHECK(c.log().find("event=drain-cut-short signal=15") != std::string::npos);
  CHECK(c.log().find("event=stopping signal=15") != std::string::npos);
  watching.TryCancel();
  (void)watch->Finish();
  swarm.reset();
}

TEST_CASE("drain: the coordinator stops by itself when the drain is over",
          "[transport][operations][drain]") {
  test::ServedCoordinator c("cgp-drain-ends", 1);
  c.serve({"--drain-ms", "500"});
  REQUIRE(test::within(30s, [&] { return c.status().has_value(); }));
  c.signal(SIGINT);
  CHECK(c.wait_exit(60s) == 0);  // one signal only
  const std::string log = c.log();
  INFO(log);
  const auto draining = log.find("event=draining signal=2 drain_ms=500");
  REQUIRE(draining != std::string::npos);
  CHECK(log.find("event=stopping signal=2", draining) != std::string::npos);
  CHECK(log.find("drain-cut-short") == std::string::npos);
}

TEST_CASE("drain: a drain outside 0 .. 10 minutes is refused by name",
          "[transport][operations][drain]") {
  test::ServedCoordinator c("cgp-drain-bad", 1);
  const std::vector<std::string> serve = {"serve",          "--listen",
                                          c.address,        "--devices",
                                          c.devices_file(), "--analyst-credential",
                                          c.path("analyst")};
  for (const char* value : {"-1", "600001", "soon"}) {
    INFO("--drain-ms " << value);
    auto arguments = serve;
    arguments.insert(arguments.end(), {"--drain-ms", value});
    CHECK(c.run(arguments) == 2);
    CHECK(c.command_log().find("--drain-ms") != std::string::npos);
  }
  std::ofstream(c.path("bad.toml")) << "[serve]\ndrain-ms = 700000\n";
  auto from_file = serve;
  from_file.insert(from_file.begin(), {"--config", c.path("bad.toml")});
  CHECK(c.run(from_file) == 2);
  CHECK(c.command_log().find("drain-ms") != std::string::npos);

  // The library refuses it too, by its own name.
  transport::CoordinatorOptions options;
  options.device_ids = {"d0"};
  options.drain = transport::CoordinatorOptions::kMaxDrain + 1ms;
  auto refused = transport::CoordinatorService::start(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().parameter == "drain");
  options.drain = -1ms;
  CHECK(transport::CoordinatorService::start(options).error().parameter == "drain");
}

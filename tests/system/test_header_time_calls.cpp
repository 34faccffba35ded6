// Analyst calls are taken at their headers (transport/src/header_time_service.hpp): one without
// the credential ends there, one with it is counted per connection, per address and in all, and
// one whose request does not come is ended after the limit, so that nobody holds calls that
// gRPC would otherwise keep, unseen, until their request came.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/credentials.hpp"
#include "network_fixtures.hpp"
#include "support/raw_http2.hpp"

using namespace cgp;
using namespace std::chrono_literals;

TEST_CASE("analyst: calls are counted from their headers and a withheld request is cut",
          "[transport][analyst][hostile]") {
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(2);
  options.analyst_credential_sha256 = transport::sha256_of("analyst-secret");
  options.gateway.limits.analyst_calls = {1024, 256, 4, 3s};
  auto service = *transport::CoordinatorService::start(options);
  const test::RawHttp2Peer::Headers credential = {{"cgp-analyst-credential", "analyst-secret"}};

  // 10 status calls with the credential and no request on one connection: 4 are held, 6 are
  // refused at once; the 4 end when their request has not come within 3 s.
  test::RawHttp2Peer peer("127.0.0.31", service->port());
  REQUIRE(peer.connected());
  const auto opened = std::chrono::steady_clock::now();
  const auto ids = peer.open_streams("/cgp.v1.Analyst/Status", 10, false, "", credential);
  peer.read_until(2500ms, [&] { return peer.ended().size() >= 6; });
  REQUIRE(std::chrono::steady_clock::now() - opened < 3s);  // else the 4 may have been cut too
  CHECK(peer.ended().size() == 6);
  const auto cut_from = std::chrono::steady_clock::now();
  peer.read_until(5s, [&] { return peer.ended().size() == ids.size(); });
  CHECK(peer.ended().size() == ids.size());
  INFO("cut after " << std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - cut_from)
                           .count()
                    << " ms");
  CHECK(peer.connected());

  // The wrong credential: every call ends at its headers, nothing is held (all 100 end well
  // before the 3 s a held call would take).
  test::RawHttp2Peer stranger("127.0.0.32", service->port());
  const auto tried = std::chrono::steady_clock::now();
  const auto tries = stranger.open_streams("/cgp.v1.Analyst/Status", 100, false, "",
                                           {{"cgp-analyst-credential", "guess"}});
  stranger.read_until(2s, [&] { return stranger.ended().size() == tries.size(); });
  CHECK(stranger.ended().size() == tries.size());
  CHECK(std::chrono::steady_clock::now() - tried < 3s);

  // The analyst gets in as before, and a refused call is named.
  auto analyst =
      *analyst::AnalystClient::connect({"127.0.0.1:" + std::to_string(service->port()),
                                        "analyst-secret", "", 10s, std::nullopt, std::nullopt});
  CHECK(analyst.status().has_value());
  auto wrong = *analyst::AnalystClient::connect({"127.0.0.1:" + std::to_string(service->port()),
                                                 "guess", "", 10s, std::nullopt, std::nullopt});
  auto refused = wrong.status();
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::unauthenticated);
  CHECK(refused.error().parameter == "credential");
}

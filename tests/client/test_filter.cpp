#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>

#include "cgp/client/filter.hpp"
#include "cgp/common/privacy/approx_gp_filter.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "device_fixtures.hpp"
#include "support/lean.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::client;

TEST_CASE("filter: refusals depend only on charges, sticky HALT stops for good",
          "[client][filter]") {
  PrivacyFilter filter(*DeviceConfig::cgp(1.0));
  CHECK(filter.admits(0.6));
  filter.commit(0.6);
  CHECK_FALSE(filter.admits(0.5));
  CHECK_FALSE(filter.halt_if_sticky());
  CHECK(filter.admits(0.3));  // a smaller later request still fits (Thm 4.3)
  CHECK(filter.remaining() <= 0.4);
  CHECK(filter.remaining() >= 0.4 * (1 - 1e-12));

  PrivacyFilter sticky(*DeviceConfig::cgp(1.0, true));
  sticky.commit(0.6);
  CHECK_FALSE(sticky.admits(0.5));
  CHECK(sticky.halt_if_sticky());
  CHECK_FALSE(sticky.admits(0.01));  // Alg. 1: after HALT nothing more
  CHECK(sticky.remaining() == 0);
  CHECK_FALSE(filter.admits(NAN));
  CHECK_FALSE(filter.admits(-1));
}

// Thousands of random adversarial sequences against real devices: random ρ (log-uniform over
// 8 decades), statistics, invalid requests, replays of earlier ids with the same and with
// other content. Invariant: the charges of the distinct answered requests never exceed the
// filter's capacity, and for the approximate-GP filter eq. (10) holds for their total.
TEST_CASE("filter: adversarial request sequences never overspend", "[client][filter]") {
  CGP_SEEDED(2026);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int sequence = 0; sequence < test::repetitions(2000, 500); ++sequence) {
    const bool approximate = sequence % 2 == 1;
    const bool sticky = sequence % 5 == 0;
    auto config = approximate ? *DeviceConfig::approximate_gp(std::pow(10.0, -2 + 2 * unit(rng)),
                                                              std::pow(10.0, -9 + 6 * unit(rng)),
                                                              std::pow(10.0, 3 * unit(rng)), sticky)
                              : *DeviceConfig::cgp(std::pow(10.0, -4 + 4 * unit(rng)), sticky);
    auto device = test::located_device(config, seed + static_cast<std::uint64_t>(sequence));
    double answered_total = 0;
    bool refused_before = false;
    std::vector<std::string> sent;
    for (int step = 0; step < 40; ++step) {
      std::string bytes;
      double kind = unit(rng);
      double rho = config.rho_capacity() * std::pow(10.0, -4 + 4.5 * unit(rng));
      if (kind < 0.15 && !sent.empty()) {
        bytes = sent[static_cast<std::size_t>(unit(rng) * static_cast<double>(sent.size()))];
      } else if (kind < 0.25 && !sent.empty()) {  // same id, other content
        bytes = test::location_request_bytes("q" + std::to_string(step % 3), 1, rho * 1.5);
      } else if (kind < 0.3) {  // invalid
        bytes = test::location_request_bytes("q", static_cast<std::uint32_t>(step + 100), -rho);
      } else if (kind < 0.65) {
        bytes = test::location_request_bytes("q" + std::to_string(step), 1, rho);
      } else {
        auto request = *DeviceRequest::distance_to_point({"d" + std::to_string(step), 2},
                                                         "location", {0, 0}, rho);
        bytes = wire::serialize(wire::request_to_wire(request));
      }
      const double spent_before = device.spent();
      auto reply = test::parse_reply(device.handle(test::bytes_of(bytes)));
      const bool replay = std::find(sent.begin(), sent.end(), bytes) != sent.end();
      if (reply.status() == v1::ANSWERED) {
        if (!replay) answered_total += reply.charged_rho();
        CHECK_FALSE((sticky && refused_before && !replay));
      } else {
        CHECK(reply.charged_rho() == 0);
        CHECK(device.spent() == spent_before);  // nothing charged for a refusal or rejection
      }
      if (reply.status() == v1::REFUSED_BUDGET) refused_before = true;
      if (reply.status() == v1::ANSWERED && !replay) sent.push_back(bytes);
      CHECK(reply.remaining_budget() >= 0);
    }
    INFO("sequence " << sequence);
    CHECK(answered_total <= config.rho_capacity());
    CHECK(device.spent() <= config.rho_capacity());
    CHECK(device.spent() >= answered_total * (1 - 1e-12));
    if (approximate) {
      CHECK(privacy::approx_gp_filter_continues(answered_total, config.budget(), config.delta(),
                                                config.lambda()));
    }
  }
}

TEST_CASE("filter: a device charges device_charge(rho) and reports what remains",
          "[client][filter]") {
  auto config = *DeviceConfig::cgp(1.0);
  auto device = test::located_device(config, 1);
  auto reply =
      test::parse_reply(device.handle(test::bytes_of(test::location_request_bytes("q", 1, 0.25))));
  REQUIRE(reply.status() == v1::ANSWERED);
  CHECK(reply.charged_rho() == privacy::device_charge(0.25));
  CHECK(reply.remaining_budget() == Approx(1 - privacy::device_charge(0.25)).epsilon(1e-12));
  CHECK(reply.remaining_budget() <= 1 - privacy::device_charge(0.25));
  CHECK(reply.values_size() == 2);
}

// The device -> virtual shard rule and the shard address template (cgp/protocol/virtual_shard.hpp):
// known answers computed independently (Python's hashlib), spread over shards, and the
// template's refusals.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cgp/protocol/virtual_shard.hpp"

using namespace cgp;
using namespace cgp::protocol;

TEST_CASE("virtual_shard matches the published rule on known ids", "[virtual_shard]") {
  // int.from_bytes(hashlib.sha256(id.encode()).digest()[:8], 'big') % shards
  CHECK(virtual_shard("device-0", 4096) == 4052);
  CHECK(virtual_shard("phone-17", 4096) == 3467);
  CHECK(virtual_shard("", 4096) == 3092);
  CHECK(virtual_shard("device-0", 7) == 1);
  CHECK(virtual_shard("\xc3\xbc"
                      "n\xc3\xaf"
                      "code",
                      4096) == 3762);  // "ünïcode" in UTF-8
  CHECK(virtual_shard("device-0", 1) == 0);
  CHECK(virtual_shard("device-0", 0) == 0);
}

TEST_CASE("virtual_shard spreads ids evenly over the shards", "[virtual_shard]") {
  // 64 shards, 64,000 ids: a binomial(64000, 1/64) count has mean 1000 and sd ~31; every count
  // within 1000 ± 250 (8 sd). Deterministic ids: the check has no false-failure rate.
  std::vector<int> counts(64, 0);
  for (int i = 0; i < 64000; ++i) ++counts[virtual_shard("device-" + std::to_string(i), 64)];
  CHECK(*std::min_element(counts.begin(), counts.end()) > 750);
  CHECK(*std::max_element(counts.begin(), counts.end()) < 1250);
}

TEST_CASE("shard_address fills every {shard} of the template", "[virtual_shard]") {
  CHECK(shard_address("s{shard}.devices.example.org:443", 17) == "s17.devices.example.org:443");
  CHECK(shard_address("{shard}-{shard}.x:1", 4095) == "4095-4095.x:1");
  CHECK(shard_address("coordinator.example.org:443", 9) == "coordinator.example.org:443");
  CHECK(validate_address_template("s{shard}.devices.example.org:443"));
  CHECK(validate_address_template("127.0.0.1:7000"));
}

TEST_CASE("validate_address_template refuses templates a device cannot dial", "[virtual_shard]") {
  for (const std::string& bad :
       {std::string(), std::string("s{shard.x:1"), std::string("s{shards}.x:1"),
        std::string("s}{.x:1"), std::string(300, 'a')}) {
    const Status status = validate_address_template(bad);
    REQUIRE_FALSE(status);
    CHECK(status.error().parameter == "address_template");
  }
}

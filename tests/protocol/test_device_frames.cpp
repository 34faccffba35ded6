// The lean transport's framing (protocol/src/device_frames.cpp): what a reader takes, refuses and
// holds, for every way a byte stream can be cut.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "cgp/protocol/device_frames.hpp"
#include "cgp/v1/cgp.pb.h"
#include "support/seed.hpp"

using namespace cgp;
using protocol::FrameKind;
using protocol::FrameReader;

namespace {

v1::DeviceToCoordinator hello_of(const std::string& id) {
  v1::DeviceToCoordinator message;
  message.mutable_hello()->set_device_id(id);
  message.mutable_hello()->set_protocol_version(1);
  return message;
}

}  // namespace

TEST_CASE("frames: a message framed and read back is the same message", "[protocol][frames]") {
  std::string bytes;
  REQUIRE(protocol::append_frame(bytes, FrameKind::message, hello_of("device-1")));
  REQUIRE(protocol::append_frame(bytes, FrameKind::end, v1::DeviceToCoordinator{}));
  FrameReader reader;
  reader.append(bytes.data(), bytes.size());
  auto first = reader.next();
  REQUIRE(first.has_value());
  REQUIRE(first->has_value());
  CHECK((**first).kind == FrameKind::message);
  v1::DeviceToCoordinator parsed;
  REQUIRE(parsed.ParseFromArray((**first).body.data(), static_cast<int>((**first).body.size())));
  CHECK(parsed.hello().device_id() == "device-1");
  auto second = reader.next();
  REQUIRE(second.has_value());
  REQUIRE(second->has_value());
  CHECK((**second).kind == FrameKind::end);  // an empty body is a frame of length 1
  CHECK((**second).body.empty());
  auto none = reader.next();
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
  reader.compact();
  CHECK(reader.pending() == 0);
}

TEST_CASE("frames: a bad header is refused from the header alone and the error names the frame",
          "[protocol][frames]") {
  const auto refused = [](const std::string& bytes, std::size_t max = protocol::kMaxFrameLength) {
    FrameReader reader;
    reader.set_max_length(max);
    reader.append(bytes.data(), bytes.size());
    auto next = reader.next();
    REQUIRE_FALSE(next.has_value());
    CHECK(next.error().parameter == "frame");
  };
  refused(std::string("\x00\x00\x00\x00", 4));            // length 0
  refused(std::string("\x00\x10\x00\x02", 4));            // 2^20 + 2: over the maximum
  refused(std::string("\xff\xff\xff\xff", 4));            // 4 GiB, no body needed
  refused(std::string("\x00\x00\x00\x01\x03", 5));        // kind 3
  refused(std::string("\x00\x00\x00\x01\x00", 5));        // kind 0
  refused(std::string("\x00\x00\x20\x01", 4), 8 * 1024);  // over a lowered maximum
  // The maximum itself is a length, not a refusal: the reader waits for its body.
  FrameReader reader;
  const std::string at_max("\x00\x10\x00\x01", 4);
  reader.append(at_max.data(), at_max.size());
  auto waiting = reader.next();
  REQUIRE(waiting.has_value());
  CHECK_FALSE(waiting->has_value());
}

TEST_CASE(
    "frames: any cut of a frame stream gives the same frames and an idle reader holds "
    "nothing",
    "[protocol][frames]") {
  const auto seed = test::test_seed(2901);
  std::mt19937_64 rng(seed);
  std::string stream;
  std::vector<std::string> ids;
  for (int k = 0; k < 200; ++k) {
    ids.push_back("d-" + std::to_string(rng() % 100000) + std::string(rng() % 100, 'x'));
    REQUIRE(protocol::append_frame(stream, FrameKind::message, hello_of(ids.back())));
  }
  for (int trial = 0; trial < 50; ++trial) {
    FrameReader reader;
    std::size_t at = 0, seen = 0;
    while (at < stream.size()) {
      const std::size_t cut = std::min<std::size_t>(stream.size() - at, 1 + rng() % 300);
      reader.append(stream.data() + at, cut);
      at += cut;
      for (;;) {
        auto next = reader.next();
        REQUIRE(next.has_value());
        if (!next->has_value()) break;
        v1::DeviceToCoordinator parsed;
        REQUIRE(
            parsed.ParseFromArray((**next).body.data(), static_cast<int>((**next).body.size())));
        REQUIRE(seen < ids.size());
        CHECK(parsed.hello().device_id() == ids[seen]);
        ++seen;
      }
      reader.compact();
    }
    CHECK(seen == ids.size());
    CHECK(reader.pending() == 0);
  }
  // Random bytes: refused or waited for, never read past what came.
  for (int trial = 0; trial < 2000; ++trial) {
    std::string noise(rng() % 64, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    FrameReader reader;
    reader.append(noise.data(), noise.size());
    std::size_t taken = 0;
    for (;;) {
      auto next = reader.next();
      if (!next || !next->has_value()) break;
      taken += 5 + (**next).body.size();
      REQUIRE(taken <= noise.size());
    }
  }
}

// The C++ device against the shipped conformance vectors: the file other implementations are
// tested with is what this device decides, case by case (a change to the device's rules shows
// here first).
#include <catch2/catch.hpp>

#include <fstream>

#include "device_vectors.hpp"

TEST_CASE("conformance: the C++ device decides every shipped vector as the file says",
          "[conformance]") {
  std::ifstream in(CGP_DEVICE_VECTORS);
  REQUIRE(in);
  const auto file = nlohmann::json::parse(in);
  REQUIRE(file.at("format") == "cgpkit-device-conformance/1");
  std::size_t cases = 0, answered = 0, refused = 0, rejected = 0;
  for (const auto& group : file.at("groups")) {
    const auto expects = cgp::conformance::evaluate_group(group);
    REQUIRE(expects.size() == group.at("cases").size());
    for (std::size_t k = 0; k < expects.size(); ++k) {
      const auto& c = group.at("cases")[k];
      INFO("group " << group.at("name") << ", case " << c.at("name"));
      CHECK(expects[k] == c.at("expect"));
      const auto status = c.at("expect").at("status").get<std::string>();
      answered += status == "ANSWERED";
      refused += status == "REFUSED_BUDGET";
      rejected += status == "REJECTED_INVALID";
      ++cases;
    }
  }
  // The file covers each outcome, and is not trivially small.
  CHECK(cases >= 200);
  CHECK(answered >= 100);
  CHECK(refused >= 5);
  CHECK(rejected >= 30);
}

TEST_CASE("conformance: the shipped vectors are what the generator writes today", "[conformance]") {
  std::ifstream in(CGP_DEVICE_VECTORS);
  REQUIRE(in);
  const auto file = nlohmann::json::parse(in);
  auto groups = cgp::conformance::device_vector_definitions();
  REQUIRE(groups.size() == file.at("groups").size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto shipped = file.at("groups")[g];
    for (auto& c : shipped.at("cases")) c.erase("expect");
    INFO("group " << groups[g].at("name"));
    CHECK(groups[g] == shipped);
  }
}

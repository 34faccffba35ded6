// The engine against the shipped reply-validation vectors: what the coordinator counts, reports
// and charges its mirror for each device reply is what the file says.
#include <catch2/catch.hpp>

#include <fstream>

#include "reply_vectors.hpp"

TEST_CASE("conformance: the coordinator counts and charges every shipped reply as the file says",
          "[conformance]") {
  std::ifstream in(CGP_REPLY_VECTORS);
  REQUIRE(in);
  const auto file = nlohmann::json::parse(in);
  REQUIRE(file.at("format") == "cgpkit-reply-conformance/1");
  const auto definitions = cgp::conformance::reply_vector_definitions();
  REQUIRE(definitions.at("cases").size() == file.at("cases").size());
  std::size_t answered = 0, unanswered = 0;
  for (std::size_t k = 0; k < file.at("cases").size(); ++k) {
    const auto& c = file.at("cases")[k];
    INFO("case " << c.at("name"));
    auto definition = c;
    definition.erase("expect");
    CHECK(definition == definitions.at("cases")[k]);  // the file is what the generator writes
    CHECK(cgp::conformance::evaluate_reply_case(file, c) == c.at("expect"));
    answered += c.at("expect").at("counted") == "answered";
    unanswered += c.at("expect").at("counted") == "unanswered";
  }
  CHECK(answered >= 5);
  CHECK(unanswered >= 4);
}

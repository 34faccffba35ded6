// The coordinator's users in enrolment order (transport/src/roster.hpp): new ids are the next
// indices, a known id keeps its index through a revoke and a second enrolment, and the counts
// and snapshots queries plan with follow.
#include <catch2/catch.hpp>

#include "roster.hpp"

using namespace cgp;
using cgp::transport::detail::Roster;

TEST_CASE("roster: new ids are the next users and a known id keeps its index", "[transport]") {
  Roster roster;
  for (const char* id : {"a", "b", "c"}) {
    auto enrolled = roster.enrol(id);
    REQUIRE(enrolled.has_value());
    CHECK(enrolled->new_user);
    CHECK_FALSE(enrolled->readmitted);
  }
  CHECK(roster.size() == 3);
  CHECK(roster.find("b") == coordinator::UserId{1});
  CHECK_FALSE(roster.find("z").has_value());

  CHECK(roster.revoke("b"));
  CHECK_FALSE(roster.revoke("b"));  // once
  CHECK_FALSE(roster.revoke("z"));  // not enrolled
  CHECK(roster.not_revoked() == 2);
  CHECK(roster.revoked_flags(3) == std::vector<char>{0, 1, 0});

  // Enrolled again: the same index, not revoked any more; a new id after it is the next.
  auto again = roster.enrol("b");
  REQUIRE(again.has_value());
  CHECK(again->user == 1);
  CHECK_FALSE(again->new_user);
  CHECK(again->readmitted);
  auto unchanged = roster.enrol("a");
  REQUIRE(unchanged.has_value());
  CHECK(unchanged->user == 0);
  CHECK_FALSE(unchanged->readmitted);
  auto late = roster.enrol("late");
  REQUIRE(late.has_value());
  CHECK(late->user == 3);
  CHECK(roster.not_revoked() == 4);
  CHECK(roster.revoked_flags(2) == std::vector<char>{0, 0});

  // Who joined since a query last looked (it planned over the first 3).
  CHECK(roster.ids_from(3) == std::vector<std::string>{"late"});
  CHECK(roster.ids_from(4).empty());
  CHECK(roster.ids_from(9).empty());
}

// The gateway's round table on its own: replies go only to the round they
// name, only for the device a stream authenticated as, once, and never after the round closed.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <thread>

#include "cgp/common/wire/codec.hpp"
#include "round_table.hpp"

using namespace cgp;
using namespace cgp::transport::detail;
using coordinator::ReplyKind;

namespace {

v1::DeviceReply answer(const std::string& query, std::uint32_t round, double value) {
  DeviceReply reply;
  reply.id = {query, round};
  reply.status = ReplyStatus::answered;
  reply.values = {value};
  reply.charged_rho = 0.1;
  reply.remaining_budget = 0.9;
  return wire::reply_to_wire(reply);
}

}  // namespace

TEST_CASE("round table: a reply lands in its own round and slot once", "[transport][gateway]") {
  RoundTable table;
  coordinator::RoundReplies replies;
  replies.resize(2, 1);
  const std::string a = "device-a", b = "device-b";
  int stream_a = 0, stream_b = 0, newer_b = 0;  // stand-ins for the sessions' addresses
  auto round = std::make_shared<PendingRound>(replies, 2);
  CHECK(round->expect(a, 0, &stream_a));
  CHECK(round->expect(b, 1, &stream_b));
  CHECK_FALSE(round->expect(b, 1, &stream_b));  // a device is asked once per round
  const RoundTable::Key key{"q", 1};
  REQUIRE(table.open(key, round));
  // The same round id again (two queries sharing an id): refused, and closing the refused one
  // leaves the round in flight alone.
  coordinator::RoundReplies other_replies;
  other_replies.resize(2, 1);
  auto duplicate = std::make_shared<PendingRound>(other_replies, 2);
  CHECK_FALSE(table.open(key, duplicate));
  table.close(key, *duplicate);

  CHECK_FALSE(table.deliver(a, answer("q", 2, 5)).taken);      // another round of the query
  CHECK_FALSE(table.deliver(a, answer("other", 1, 5)).taken);  // another query
  CHECK_FALSE(
      table.deliver("device-c", answer("q", 1, 5)).taken);  // a device the round did not ask
  CHECK(table.deliver(a, answer("q", 1, 5)).taken);
  CHECK_FALSE(table.deliver(a, answer("q", 1, 6)).taken);  // a second answer from the same stream
  CHECK(replies.kind[0] == ReplyKind::answered);
  CHECK(replies.values[0] == 5);
  CHECK(replies.kind[1] == ReplyKind::no_answer);

  // An older stream of b, replaced before the round, goes away: the round keeps waiting.
  table.device_gone(b, &newer_b);
  CHECK(table.deliver(b, answer("q", 1, 8)).taken);  // b's answer still lands
  CHECK(replies.values[1] == 8);
  CHECK(replies.kind[1] == ReplyKind::answered);
  // A round whose device's stream goes away stops waiting for it, and it stays unanswered.
  auto second = std::make_shared<PendingRound>(replies, 2);
  replies.resize(2, 1);
  const RoundTable::Key second_key{"q", 2};
  second->expect(a, 0, &stream_a);
  second->expect(b, 1, &stream_b);
  REQUIRE(table.open(second_key, second));
  CHECK(table.deliver(a, answer("q", 2, 5)).taken);
  std::thread gone([&] { table.device_gone(b, &stream_b); });
  std::size_t left = 0;
  CHECK(second->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30), left));
  CHECK(left == 0);
  gone.join();
  table.close(second_key, *second);
  table.close(key, *round);
  CHECK(replies.kind[1] == ReplyKind::no_answer);
  CHECK_FALSE(table.deliver(b, answer("q", 2, 7)).taken);  // late
  CHECK(std::isnan(replies.values[1]));
  // Closed rounds free their key.
  CHECK(table.open(key, std::make_shared<PendingRound>(replies, 2)));
}

TEST_CASE("round table: a round with nothing to wait for returns at once", "[transport][gateway]") {
  coordinator::RoundReplies replies;
  replies.resize(3, 1);
  const std::string a = "device-a";
  PendingRound round(replies, 3);
  round.expect(a, 0, nullptr);
  round.give_up(0);
  const auto start = std::chrono::steady_clock::now();
  std::size_t left = 1;
  CHECK(round.wait_until(start + std::chrono::seconds(30), left));  // ended: nothing awaited
  CHECK(left == 0);
  PendingRound refused(replies, 3);
  refused.expect(a, 0, nullptr);
  refused.give_up_all();
  CHECK(refused.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30), left));
  CHECK_FALSE(refused.take(a, answer("q", 1, 1)).taken);  // never opened: nothing is taken
}

TEST_CASE("round table: a check-in whose push failed leaves the request waiting, not unanswered",
          "[transport][gateway][check-in]") {
  RoundTable table;
  coordinator::RoundReplies replies;
  replies.resize(2, 1);
  const std::string a = "device-a", b = "device-b";
  int first = 0, second = 0, b_stream = 0;  // stand-ins for the sessions' addresses
  auto round = std::make_shared<PendingRound>(replies, 2);
  REQUIRE(round->expect_queued(a, 0));
  REQUIRE(round->expect_queued(b, 1));
  const RoundTable::Key key{"q", 1};
  REQUIRE(table.open(key, round));
  REQUIRE(round->deliver_queued(a, &first));
  CHECK_FALSE(round->deliver_queued(a, &second));  // already on its way on `first`
  CHECK_FALSE(round->requeue(a, &second));         // not the stream it went to
  REQUIRE(round->requeue(a, &first));              // the push on `first` failed
  table.device_gone(a, &first);                    // that stream's end settles nothing
  REQUIRE(round->deliver_queued(a, &second));      // the next check-in gets it
  CHECK(table.deliver(a, answer("q", 1, 3)).taken);
  CHECK_FALSE(round->requeue(a, &second));  // settled: nothing to wait for again
  // b's push fails too and b never checks in again: not delivered, not unanswered.
  REQUIRE(round->deliver_queued(b, &b_stream));
  REQUIRE(round->requeue(b, &b_stream));
  table.close(key, *round);
  CHECK(replies.kind[0] == ReplyKind::answered);
  CHECK(replies.kind[1] == ReplyKind::not_delivered);
  CHECK_FALSE(round->requeue(b, &b_stream));  // closed
}

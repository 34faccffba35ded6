// The rounds in flight and where their replies go. A reply is taken by the round of its
// (query id, round) for the device id its stream authenticated as, never for anything the reply
// itself claims; each round has its own lock, the table one for finding them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cgp/coordinator/fleet.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::transport::detail {

// What became of a reply a device's stream delivered (the gateway logs the cause of every reply
// it could not use: docs/protocol.md §4).
struct Delivery {
  bool taken = false;  // an open round waited for this device's reply and recorded it
  coordinator::ReplyDefect defect = coordinator::ReplyDefect::none;  // an answer it cannot use
  std::size_t expected_values = 0;  // the round's output dimension, when taken
};

// One round: the slot of each device asked, which slots are settled, and the replies.
class PendingRound {
 public:
  // `replies` outlives the round (NetworkFleet::ask's caller's), sized for `slots` users.
  PendingRound(coordinator::RoundReplies& replies, std::size_t slots);

  // Before the round opens: device `id`, asked on the stream `session`, answers into slot k.
  // False (nothing recorded) when the round already expects `id`: a device is asked once.
  bool expect(const std::string& id, std::size_t k, const void* session);
  // The same for a device that is not connected (check-in fleets): its request waits in the
  // gateway's mailbox until the device checks in (deliver_queued) or the round closes — then
  // the slot is not_delivered (nothing left the coordinator, nothing charged).
  bool expect_queued(const std::string& id, std::size_t k);
  // Device `id` checked in on stream `session`: true when its queued request should be sent
  // now (the round is open and still waits for it); the slot then waits on that stream.
  bool deliver_queued(std::string_view id, const void* session);
  // The push after deliver_queued failed (the stream was closing): the request waits again
  // for the next check-in, unless the slot has settled meanwhile. True if it waits again.
  bool requeue(std::string_view id, const void* session);
  // Nothing will come for slot k (its request could not be sent).
  void give_up(std::size_t k);
  // Nothing will come at all (the round could not open): waiting returns at once.
  void give_up_all();
  // A reply from the stream of `device_id`: not taken when the round does not wait for it.
  Delivery take(std::string_view device_id, const v1::DeviceReply& reply);
  // The stream `session` of `device_id` went away: if the request went to that stream, its slot
  // stops being awaited (a stream replaced by a newer one does not cancel the newer's slot).
  void device_gone(std::string_view device_id, const void* session);
  // Waits until every awaited device answered (true) or the deadline passed (false); `left`
  // gets how many were still awaited then.
  bool wait_until(std::chrono::steady_clock::time_point deadline, std::size_t& left);
  // Late replies are no longer taken; slots whose request never left are not_delivered.
  void close();
  bool is_open();
  // How many asked devices the round still waits for (a console's live view).
  std::size_t awaited();

 private:
  struct Slot {
    std::size_t k;
    const void* session;  // the stream the request went to (compared, never used)
    bool queued = false;  // not sent yet: waiting for the device to check in
  };
  bool expect_slot(const std::string& id, Slot slot);
  void settle(std::size_t k);  // under mutex_

  std::mutex mutex_;
  std::condition_variable settled_;
  bool open_ = true;
  std::size_t awaited_ = 0;
  std::unordered_map<std::string_view, Slot> slot_of_device_;  // ids owned by the caller
  std::vector<bool> settled_slot_;
  coordinator::RoundReplies& replies_;
};

class RoundTable {
 public:
  using Key = std::pair<std::string, std::uint32_t>;  // (query id, round)
  // False when the same round is already in flight (a duplicated query id).
  bool open(const Key& key, const std::shared_ptr<PendingRound>& round);
  // Forgets the round under `key` if it is `round` (never another query's round).
  void close(const Key& key, PendingRound& round);
  // A reply to the round it names, from `device_id`'s stream: false when no open round takes it.
  Delivery deliver(std::string_view device_id, const v1::DeviceReply& reply);
  // Every open round stops waiting for what it asked on `device_id`'s stream `session`.
  void device_gone(std::string_view device_id, const void* session);

 private:
  // Finds a reply's round by its (query id, round) without copying the id: a lookup per reply.
  struct KeyLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::string_view(a.first) < std::string_view(b.first) ||
             (std::string_view(a.first) == std::string_view(b.first) && a.second < b.second);
    }
  };
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<PendingRound>, KeyLess> rounds_;
};

}  // namespace cgp::transport::detail

// The one interface between the query engine and the devices (DESIGN §3, §4): ask a set of
// users one round of a statistic at per-user ρ, get each user's reply. The same query code runs
// against the in-process simulated fleet and, later, real devices over the network.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/request.hpp"
#include "cgp/coordinator/charge.hpp"

namespace cgp::coordinator {

using UserId = std::uint32_t;
class RoundFold;  // round_fold.hpp

enum class ReplyKind : std::uint8_t {
  answered,   // values hold φ(x) + noise; charged was charged
  refused,    // refused_budget: nothing released or charged
  rejected,   // rejected_invalid: the request was invalid for this device
  no_answer,  // the device did not answer this round (network fleets; timeouts)
  // The request never left the coordinator: a check-in device that did not check in within
  // the round's window. Nothing was released or charged, so the mirror charges nothing.
  not_delivered,
};

struct RoundRequest {
  std::string query_id;
  std::uint32_t round = 1;  // 1-based
  std::string component_id = "location";
  StatisticKind statistic = StatisticKind::location;
  std::span<const double> point;             // distance_to_point
  const geometry::Region* region = nullptr;  // signed_distance_to_region
  std::span<const UserId> users;             // whom to ask, in this order
  std::span<const double> rho;               // the ρ asked of users[k]
};

// Replies in the order of RoundRequest::users.
struct RoundReplies {
  std::size_t output_dimension = 0;  // values per answered user
  std::vector<ReplyKind> kind;
  std::vector<double> values;     // kind.size() × output_dimension; NaN unless answered
  std::vector<Charge> charged;    // what each device charged (0 unless answered)
  std::vector<double> remaining;  // each device's remaining budget after the round
  void resize(std::size_t users, std::size_t dimension);
};

// The most each user of a round can be charged, in the order of request.users:
// privacy::device_charge(request.rho[k]) (what the budget mirror charges an unanswered request).
// Written down before the requests leave, it is what a restarted coordinator charges for a
// round it never heard the end of (BudgetMirror::charge_unsettled).
void worst_case_charges(const RoundRequest& request, std::vector<double>& out);

// Checks the users' points of an in-process fleet: n × dimension finite values, 1 ≤ dimension
// ≤ 4096, n ≥ 1 and fitting a UserId.
Status validate_fleet_points(std::span<const double> points, std::size_t dimension);

// The device request a round sends to its k-th user (id = (query_id, round)).
Expected<DeviceRequest> device_request_for(const RoundRequest& request, std::size_t k);

// Slot k of a round from a device's reply: the one mapping from a device's ReplyStatus to the
// engine's ReplyKind, for every fleet that has DeviceReplys (in-process devices, the network).
// An answer the engine cannot use (wrong number of values, a value not finite) stays
// no_answer, so that the budget mirror charges it in the worst case; what was wrong with it is
// returned, for the operator's log (a device implementation of its own is debugged from there).
enum class ReplyDefect : std::uint8_t { none, wrong_dimension, not_finite };
ReplyDefect record_reply(const DeviceReply& reply, std::size_t k, RoundReplies& out) noexcept;

class Fleet {
 public:
  virtual ~Fleet() = default;
  virtual std::size_t size() const noexcept = 0;
  // Dimension of the component a query asks about.
  virtual std::size_t dimension() const noexcept = 0;
  // The budget every device starts with, in ρ units (the filter capacity).
  virtual double initial_budget() const noexcept = 0;
  // One round, or a part of one (see concurrency): no virtual call per user.
  virtual void ask(const RoundRequest& request, RoundReplies& replies) = 0;
  // 0 (the default): a round is asked in one call, as a network fleet needs (one deadline per
  // round). n ≥ 1: the fleet takes a round in chunks of users, from up to n threads at once
  // (each call with different users); the engine then asks fixed chunks, in parallel, and
  // reads each chunk's replies while they are in cache.
  virtual unsigned concurrency() const noexcept { return 0; }
  // A fleet in this process may run a chunk of a round together with the engine's reading of
  // its replies, in one pass (round_fold.hpp): request.users are the chunk's users and
  // request.rho is empty (fold.ask gives each user's ρ, or puts the user on its not-asked
  // list); every user asked is then read with fold.fold, in the order of request.users within
  // each of fold's lists. False (the default): not done for this round, nothing was touched,
  // and the engine asks and reads it itself through ask().
  virtual bool ask_folded(const RoundRequest& request, RoundFold& fold) {
    (void)request, (void)fold;
    return false;
  }
};

}  // namespace cgp::coordinator

#include "reply_vectors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/v1/cgp.pb.h"
#include "support/hex_text.hpp"

namespace cgp::conformance {

using nlohmann::json;
using test::bytes_from_hex;
using test::bytes_to_hex;
using test::double_from_hex;
using test::hex_double;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kBudget = 1.0;              // every device's budget (the coordinator's --budget)
constexpr std::size_t kOutputDimension = 2;  // a 2-D location

// An honest answer to a request asked at `rho`, from a device whose mirror stood at `before`.
v1::DeviceReply answer(double rho, double before) {
  v1::DeviceReply reply;
  reply.mutable_id()->set_query_id("conformance");
  reply.mutable_id()->set_round(1);
  reply.set_status(v1::ANSWERED);
  reply.add_values(0x1.8p10);
  reply.add_values(-0x1.4p8);
  reply.set_charged_rho(privacy::device_charge(rho));
  reply.set_remaining_budget(
      std::max(0.0, privacy::subtract_down(before, privacy::device_charge(rho))));
  return reply;
}

json make_case(const std::string& name, const std::string& about, double rho, double before,
               const v1::DeviceReply& reply) {
  return {{"name", name},
          {"about", about},
          {"asked_rho", hex_double(rho)},
          {"mirror_before", hex_double(before)},
          {"reply_hex", bytes_to_hex(wire::serialize(reply))}};
}

}  // namespace

json reply_vector_definitions() {
  json cases = json::array();
  const double rho = 0.01, before = 0.5;
  auto add = [&](const std::string& name, const std::string& about, const v1::DeviceReply& r,
                 double asked = 0.01, double mirror = 0.5) {
    cases.push_back(make_case(name, about, asked, mirror, r));
  };
  add("answered", "an honest answer: counted, charged device_charge(rho)", answer(rho, before));
  {
    auto r = answer(rho, before);
    r.mutable_values()->RemoveLast();
    add("one-value", "one value for a 2-D statistic: unanswered (dimension)", r);
    r = answer(rho, before);
    r.add_values(1);
    add("three-values", "three values for a 2-D statistic: unanswered (dimension)", r);
    r = answer(rho, before);
    r.clear_values();
    add("no-values", "ANSWERED without values: unanswered (dimension)", r);
    r = answer(rho, before);
    r.set_values(0, kNaN);
    add("nan-value", "a NaN value: unanswered (not-finite)", r);
    r = answer(rho, before);
    r.set_values(1, -kInf);
    add("inf-value", "a -inf value: unanswered (not-finite)", r);
  }
  {
    auto r = answer(rho, before);
    r.set_charged_rho(rho / 2);
    add("charged-less",
        "a device that says it charged less: the mirror still takes the known "
        "charge device_charge(rho)",
        r);
    r = answer(rho, before);
    r.set_charged_rho(0.05);
    add("charged-more", "a device that says it charged more: the mirror takes that", r);
    r = answer(rho, before);
    r.clear_charged_rho();
    add("charged-unset", "charged_rho unset: the mirror takes the known charge", r);
  }
  {
    auto r = answer(rho, before);
    r.set_remaining_budget(0.1);
    add("remaining-lower", "a device with less left than the mirror thinks: lowered to it", r);
    r = answer(rho, before);
    r.set_remaining_budget(0.9);
    add("remaining-higher", "a device that claims more than the mirror: never raised", r);
    r = answer(rho, before);
    r.clear_remaining_budget();
    add("remaining-unset", "remaining_budget unset reads as 0: the device is retired", r);
    r = answer(rho, before);
    r.set_remaining_budget(kNaN);
    add("remaining-nan", "remaining_budget NaN: ignored", r);
    r = answer(rho, before);
    r.set_remaining_budget(-1);
    add("remaining-negative", "a negative remaining_budget: nothing left", r);
  }
  {
    v1::DeviceReply r;
    r.mutable_id()->set_query_id("conformance");
    r.mutable_id()->set_round(1);
    r.set_status(v1::REFUSED_BUDGET);
    r.set_remaining_budget(0.004);
    add("refused", "refused for budget: nothing charged, the mirror lowered to what is left", r);
    r.set_remaining_budget(0.7);
    add("refused-claims-more", "refused, claiming more than the mirror: not raised", r);
    r.clear_remaining_budget();
    add("refused-unset", "refused with remaining_budget unset: retired", r);
    r.set_status(v1::REJECTED_INVALID);
    r.set_error(v1::UNKNOWN_COMPONENT);
    r.set_remaining_budget(0.3);
    add("rejected", "rejected: nothing charged, the mirror unchanged", r);
    r.set_status(v1::REPLY_STATUS_UNSPECIFIED);
    add("status-unset", "status unset: counted rejected (cause status)", r);
    r.set_status(static_cast<v1::ReplyStatus>(9));
    add("status-unknown", "status 9: counted rejected (cause status)", r);
  }
  add("answered-small-mirror",
      "an answer from a device whose mirror is below the charge: the mirror goes to 0",
      answer(rho, 0.004), rho, 0.004);
  return {{"format", "cgpkit-reply-conformance/1"},
          {"about",
           "Device replies to one request of a round (asked_rho, a 2-D location statistic, "
           "devices of budget 1) and what a conformant coordinator makes of each: counted "
           "(answered, refused, rejected, unanswered), why not answered (cause: dimension, "
           "not-finite, status, or none), the charge its result reports for the user (the "
           "device's own figure), and its budget mirror of the device after the reply, from "
           "mirror_before: the mirror takes the larger of the known and the reported charge, is "
           "lowered to a finite reported remaining_budget and never raised. Doubles are C99 "
           "hexadecimal. docs/protocol.md §4 and §5.4."},
          {"budget", hex_double(kBudget)},
          {"output_dimension", kOutputDimension},
          {"cases", cases}};
}

json evaluate_reply_case(const json& file, const json& c) {
  const double budget = double_from_hex(file.at("budget").get<std::string>());
  const double rho = double_from_hex(c.at("asked_rho").get<std::string>());
  const double before = double_from_hex(c.at("mirror_before").get<std::string>());
  v1::DeviceReply wire_reply;
  if (!wire_reply.ParseFromString(bytes_from_hex(c.at("reply_hex").get<std::string>())))
    throw std::runtime_error("reply_hex does not parse");

  coordinator::RoundReplies replies;
  replies.resize(1, file.at("output_dimension").get<std::size_t>());
  const auto defect = coordinator::record_reply(wire::reply_from_wire(wire_reply), 0, replies);
  coordinator::BudgetMirror mirror(1, budget);
  mirror.restore(0, before);
  mirror.update_with_charge(0, replies.kind[0], coordinator::Charge{privacy::device_charge(rho)},
                            replies.charged[0], replies.remaining[0]);

  std::string counted, cause = "none";
  switch (replies.kind[0]) {
    case coordinator::ReplyKind::answered:
      counted = "answered";
      break;
    case coordinator::ReplyKind::refused:
      counted = "refused";
      break;
    case coordinator::ReplyKind::rejected:
      counted = "rejected";
      break;
    default:
      counted = "unanswered";
      break;
  }
  if (defect == coordinator::ReplyDefect::wrong_dimension) cause = "dimension";
  if (defect == coordinator::ReplyDefect::not_finite) cause = "not-finite";
  const int status = wire_reply.status();
  if (status != v1::ANSWERED && status != v1::REFUSED_BUDGET && status != v1::REJECTED_INVALID)
    cause = "status";
  // What the result reports as this user's charge (QueryReport::charged): the device's own
  // figure for an answer, 0 otherwise; the mirror above is what stays conservative.
  const double reported = replies.charged[0].value();
  return {{"counted", counted},
          {"cause", cause},
          {"reported_charge", hex_double(reported)},
          {"mirror_after", hex_double(mirror.remaining(0))}};
}

}  // namespace cgp::conformance

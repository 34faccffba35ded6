#include "reply_causes.hpp"

#include <cmath>

#include "cgp/common/validate.hpp"
#include "cgp/protocol/log_format.hpp"

namespace cgp::transport::detail {

using protocol::log_value;

namespace {

std::string about(std::string_view event, std::string_view device_id,
                  const v1::DeviceReply& reply) {
  return "event=" + std::string(event) + " device=" + log_value(device_id) +
         " query=" + log_value(reply.id().query_id()) +
         " round=" + std::to_string(reply.id().round());
}

// The wire name (what docs/protocol.md §4 lists), or the number a newer device sent.
std::string error_name(int code) {
  const std::string& name = v1::ErrorCode_Name(code);
  return name.empty() ? std::to_string(code) : name;
}

}  // namespace

std::optional<ReplyCause> reply_cause(std::string_view device_id, const v1::DeviceReply& reply,
                                      const Delivery& delivery) {
  if (!delivery.taken) {
    return ReplyCause{"reply-unmatched",
                      about("reply-unmatched", device_id, reply) +
                          " note=\"no open round waits for this device's reply: the round "
                          "closed, never asked it, or was answered already\""};
  }
  switch (delivery.defect) {
    case coordinator::ReplyDefect::wrong_dimension:
      return ReplyCause{"reply-unusable",
                        about("reply-unusable", device_id, reply) +
                            " cause=dimension values=" + std::to_string(reply.values_size()) +
                            " expected=" + std::to_string(delivery.expected_values)};
    case coordinator::ReplyDefect::not_finite:
      return ReplyCause{"reply-unusable",
                        about("reply-unusable", device_id, reply) + " cause=not-finite"};
    case coordinator::ReplyDefect::none:
      break;
  }
  switch (reply.status()) {
    case v1::ANSWERED:
      // The device's own report lowers the mirror (never raises it): 0 retires the device. A
      // value that is not finite is ignored by the mirror, so it retires nobody.
      if (std::isfinite(reply.remaining_budget()) && !(reply.remaining_budget() > 0)) {
        return ReplyCause{"device-exhausted",
                          about("device-exhausted", device_id, reply) + " remaining_budget=" +
                              log_value(format_number(reply.remaining_budget())) +
                              " note=\"the device reports no budget left and is not asked "
                              "again; an unset remaining_budget reads as 0\""};
      }
      return std::nullopt;
    case v1::REFUSED_BUDGET:
      return ReplyCause{"reply-refused", about("reply-refused", device_id, reply) +
                                             " remaining_budget=" +
                                             log_value(format_number(reply.remaining_budget()))};
    case v1::REJECTED_INVALID:
      return ReplyCause{"reply-rejected", about("reply-rejected", device_id, reply) +
                                              " error=" + error_name(reply.error()) +
                                              " message=" + log_value(reply.error_message())};
    default:
      return ReplyCause{"reply-unusable", about("reply-unusable", device_id, reply) +
                                              " cause=status status=" +
                                              std::to_string(static_cast<int>(reply.status()))};
  }
}

}  // namespace cgp::transport::detail

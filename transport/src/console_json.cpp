#include "console_json.hpp"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace cgp::transport::detail {

std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status message_from_json(std::string_view body, google::protobuf::Message& out) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), &out, options);
  if (parsed.ok()) return {};
  return Error{ErrorCode::malformed_message, "body",
               "body: not a " + out.GetDescriptor()->full_name() +
                   " in JSON: " + std::string(parsed.message())};
}

std::string message_to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  // Printing a valid message cannot fail (no Any fields here).
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

namespace {

nlohmann::json spending_of(const v1::QueryResult& full) {
  double total = 0, largest = 0;
  std::size_t charged = 0;
  for (const auto& charge : full.charges()) {
    if (!(charge.rho() > 0)) continue;
    ++charged;
    total += charge.rho();
    largest = std::max(largest, charge.rho());
  }
  std::vector<std::uint64_t> users(charged > 0 ? kSpendingBins : 0, 0);
  for (const auto& charge : full.charges()) {
    if (!(charge.rho() > 0)) continue;
    // Bin b holds charges in (b·w, (b + 1)·w], w = largest / bins; the largest is in the last.
    const double scaled = std::ceil(charge.rho() / largest * kSpendingBins) - 1;
    users[static_cast<std::size_t>(std::clamp(scaled, 0.0, kSpendingBins - 1.0))] += 1;
  }
  nlohmann::json bins = nlohmann::json::array();
  for (std::size_t b = 0; b < users.size(); ++b)
    bins.push_back({{"lower", largest * static_cast<double>(b) / kSpendingBins},
                    {"upper", largest * static_cast<double>(b + 1) / kSpendingBins},
                    {"users", users[b]}});
  return {{"users_charged", charged},
          {"users_not_charged", full.users() > charged ? full.users() - charged : 0},
          {"total_rho", total},
          {"max_rho", largest},
          {"bins", std::move(bins)}};
}

}  // namespace

std::string console_result_json(const v1::QueryResult& full) {
  v1::QueryResult shown = full;
  shown.clear_charged();
  shown.clear_charges();
  shown.clear_refused();
  shown.clear_rejected();
  shown.clear_unanswered();
  shown.clear_not_reached();
  shown.clear_users_from();
  shown.clear_users_next();
  nlohmann::json out = nlohmann::json::parse(message_to_json(shown));
  for (const char* list : {"charged", "charges", "refused", "rejected", "unanswered", "not_reached",
                           "users_from", "users_next"})
    out.erase(list);
  out["spending"] = spending_of(full);
  out["counts"] = {{"refused", full.refused_size()},
                   {"rejected", full.rejected_size()},
                   {"unanswered", full.unanswered_size()},
                   {"not_reached", full.not_reached_size()}};
  return json_text(out);
}

std::string error_json(const Error& error, std::string_view status) {
  return json_text(nlohmann::json{{"error",
                                   {{"status", status},
                                    {"code", error_code_name(error.code)},
                                    {"code_number", static_cast<int>(error.code)},
                                    {"parameter", error.parameter},
                                    {"message", error.message}}}});
}

}  // namespace cgp::transport::detail

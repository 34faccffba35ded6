// The console's JSON: request bodies are cgp.v1 messages in proto3's JSON mapping (the same
// messages, fields and checks as the Analyst API over gRPC: docs/console.md), responses are
// the same messages printed so, and a result is shown without its per-user lists — what the
// query cost its users comes as a histogram, never as a list of users.
#pragma once

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cgp/common/error.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {

// JSON text of `value`; bytes that are not UTF-8 (a request's path, a header, an id) become
// U+FFFD instead of an exception.
std::string json_text(const nlohmann::json& value);

// `body` as `out`: field names as in the .proto (snake_case) or lowerCamelCase, unknown fields
// refused. Errors: malformed_message naming "body", with what the parser found.
Status message_from_json(std::string_view body, google::protobuf::Message& out);

// Every field, zeros included, under its .proto name (64-bit integers as strings, as proto3's
// JSON mapping has them).
std::string message_to_json(const google::protobuf::Message& message);

// A result for the console: `full` (every user's entries) without its per-user lists, with
// "spending" (users charged, total and largest charge, and a histogram of the charges in
// kSpendingBins equal bins over (0, largest]) and "counts" of the users refused, rejected,
// unanswered and not reached.
inline constexpr int kSpendingBins = 20;
std::string console_result_json(const v1::QueryResult& full);

// {"error": {"status": "INVALID_ARGUMENT", "code": "not_finite", "code_number": 1,
// "parameter": "rho", "message": "rho: ..."}}, `status` the kind (as gRPC names it).
std::string error_json(const Error& error, std::string_view status);

}  // namespace cgp::transport::detail

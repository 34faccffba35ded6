// Identifiers at the network edge and values in the coordinator's event log. Device ids, query
// ids and enrolment ids come from clients; a newline or a quote in one must not forge a log line
// or corrupt an enrolment file.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "cgp/common/expected.hpp"

namespace cgp::protocol {

// An id: 1 to 128 bytes of A–Z a–z 0–9 and . _ - : @ / + (no spaces, commas, quotes or
// control characters). invalid_argument (or too_large) naming `parameter` otherwise.
Status require_id(std::string_view parameter, std::string_view id);

// A logfmt value: as it is when it is a non-empty run of id characters, otherwise in double
// quotes with \ " and control bytes escaped (\n, \r, \t, \xHH), and cut to 256 bytes first.
std::string log_value(std::string_view value);

// Sends gRPC's own log lines (process-wide) to `sink` as "event=grpc level=E source=file:line
// message=..." lines, instead of gRPC's own format on stderr; empty restores gRPC's default.
void route_grpc_logs(std::function<void(const std::string&)> sink);

}  // namespace cgp::protocol

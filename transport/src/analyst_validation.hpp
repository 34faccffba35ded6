// The analyst service's numeric checks: every number an analyst sends is finite and in
// its documented range before anything is asked or charged — again here, whatever the client
// checked, since a hand-made gRPC request reaches the service without it. The query engine
// checks its own inputs too; these are the wire's rules (0 = the default, explicit adaptive).
#pragma once

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {

// rho, adaptive, beta and min_coverage of one query. `rho_capacity`: the devices' budget (from
// --budget), which fixes the smallest ρ a device answers (privacy::min_rho).
Status validate_query_options(const v1::QueryOptions& options, double rho_capacity);

// An accuracy target or schedule: relative in [0, 1), absolute finite ≥ 0, growth 0 or > 1,
// first in [0, 1], max_rounds ≤ 64. `needs_target`: a range or KDE target (at least one of
// relative and absolute > 0); a top-regions schedule uses neither.
Status validate_accuracy(const v1::AccuracyTarget& accuracy, bool needs_target);

// A plain query splits its ρ (`cap`) over its rounds (PM methods): its smallest round must
// still be a ρ devices of budget `rho_capacity` answer, or the query would travel to every
// device for nothing but rejections.
Status rounds_answerable(double cap, const coordinator::QueryOptions& options, double rho_capacity);

}  // namespace cgp::transport::detail

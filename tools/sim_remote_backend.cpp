#include "sim_remote_backend.hpp"

#include <cstdio>
#include <random>

#include "cgp/common/validate.hpp"

namespace cgp::experiments {

RemoteBackend::RemoteBackend(analyst::AnalystClient client, std::size_t users, std::string curator)
    : client_(std::move(client)), users_(users), curator_(std::move(curator)) {
  std::random_device entropy;
  char tag[17];
  std::snprintf(tag, sizeof tag, "%08x%08x", entropy(), entropy());
  run_tag_ = tag;
}

namespace {

// The wire carries one cap for all the users of a query.
Expected<analyst::RemoteCharges> remote_charges(const coordinator::UserCharges& charges) {
  if (!charges.is_uniform())
    return make_error(ErrorCode::invalid_argument, "charge",
                      "a live coordinator takes one charge for all the users of a query");
  std::vector<coordinator::UserId> users(charges.listed().begin(), charges.listed().end());
  return analyst::RemoteCharges::fixed(charges.cap(0), std::move(users));
}

}  // namespace

coordinator::QueryOptions RemoteBackend::named(const coordinator::QueryOptions& o) {
  coordinator::QueryOptions out = o;
  out.query_id = "sim-" + o.query_id + "-" + run_tag_ + "-" + std::to_string(next_++);
  return out;
}

Expected<coordinator::CountResult> RemoteBackend::range_count(
    const geometry::Region& range, const coordinator::UserCharges& charges,
    const coordinator::QueryOptions& o) {
  CGP_ASSIGN_OR_RETURN(auto remote_cap, remote_charges(charges));
  CGP_ASSIGN_OR_RETURN(auto remote, client_.range_count(range, remote_cap, named(o)));
  return coordinator::CountResult{remote.estimate, std::move(remote.report)};
}

Expected<coordinator::KdeResult> RemoteBackend::kde(std::span<const double> p, double bandwidth,
                                                    const coordinator::UserCharges& charges,
                                                    const coordinator::QueryOptions& o) {
  CGP_ASSIGN_OR_RETURN(auto remote_cap, remote_charges(charges));
  CGP_ASSIGN_OR_RETURN(auto remote, client_.kde(p, bandwidth, remote_cap, named(o)));
  return coordinator::KdeResult{remote.estimate, std::move(remote.report)};
}

Expected<coordinator::KnnResult> RemoteBackend::knn(std::span<const double> p, std::size_t k,
                                                    const coordinator::UserCharges& charges,
                                                    const coordinator::QueryOptions& o) {
  CGP_ASSIGN_OR_RETURN(auto remote_cap, remote_charges(charges));
  CGP_ASSIGN_OR_RETURN(auto remote, client_.knn(p, k, remote_cap, named(o)));
  return coordinator::KnnResult{std::move(remote.neighbours), std::move(remote.report)};
}

Expected<std::vector<coordinator::CountResult>> RemoteBackend::adaptive_range_counts(
    std::span<const geometry::Region> ranges, double, const coordinator::QueryOptions& o) {
  std::vector<coordinator::CountResult> results;
  results.reserve(ranges.size());
  for (const auto& range : ranges) {
    CGP_ASSIGN_OR_RETURN(auto remote,
                         client_.range_count(range, analyst::RemoteCharges::adaptive(), named(o)));
    results.push_back({remote.estimate, std::move(remote.report)});
  }
  return results;
}

Expected<coordinator::ThresholdResult> RemoteBackend::threshold(
    double q, double population, coordinator::Charge cap, const coordinator::QueryOptions& o) {
  if (curator_.empty())
    return make_error(ErrorCode::missing_field, "curator",
                      "threshold over --fleet needs --curator, the device that holds the count");
  CGP_ASSIGN_OR_RETURN(
      auto remote,
      client_.threshold(curator_, q, population, analyst::RemoteCharges::fixed(cap), named(o)));
  return coordinator::ThresholdResult{remote.below, std::move(remote.report)};
}

}  // namespace cgp::experiments

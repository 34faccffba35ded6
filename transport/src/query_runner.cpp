#include "query_runner.hpp"

#include "analyst_validation.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::transport::detail {

namespace {

coordinator::UserId global(std::span<const coordinator::UserId> ids, std::size_t local) {
  return ids.empty() ? static_cast<coordinator::UserId>(local) : ids[local];
}

template <class List>
void assign_users(const List& users, std::span<const coordinator::UserId> ids,
                  google::protobuf::RepeatedField<std::uint32_t>& out) {
  out.Clear();
  for (auto u : users) out.Add(static_cast<std::uint32_t>(global(ids, u)));
}

void fill_certificate(const coordinator::CertifiedEstimate& c,
                      std::span<const coordinator::UserId> ids, v1::QueryResult& result) {
  result.set_estimate(c.estimate);
  result.set_lower(c.lower);
  result.set_upper(c.upper);
  result.set_certified(c.certified);
  fill_report(c.report, ids, result);
}

}  // namespace

// The users a query charged, sparse: a result grows with the users it touched, not the enrolment.
void set_charges(std::span<const coordinator::Charge> charged,
                 std::span<const coordinator::UserId> ids, v1::QueryResult& out) {
  out.clear_charged();
  out.clear_charges();
  out.set_users(static_cast<std::uint32_t>(charged.size()));
  for (std::size_t u = 0; u < charged.size(); ++u) {
    if (!(charged[u].value() > 0)) continue;
    auto* charge = out.add_charges();
    charge->set_user(static_cast<std::uint32_t>(global(ids, u)));
    charge->set_rho(charged[u].value());
  }
}

template <class Report>
void fill_report(const Report& report, std::span<const coordinator::UserId> ids,
                 v1::QueryResult& out) {
  out.set_rounds_used(static_cast<std::uint32_t>(report.rounds_used));
  for (auto a : report.asked_per_round) out.add_asked_per_round(a);
  for (auto e : report.eliminated_per_round) out.add_eliminated_per_round(e);
  set_charges(report.charged, ids, out);
  assign_users(report.refused, ids, *out.mutable_refused());
  assign_users(report.rejected, ids, *out.mutable_rejected());
  assign_users(report.unanswered, ids, *out.mutable_unanswered());
  assign_users(report.not_reached, ids, *out.mutable_not_reached());
}
template void fill_report(const coordinator::QueryReport&, std::span<const coordinator::UserId>,
                          v1::QueryResult&);

Expected<coordinator::QueryOptions> engine_options(const v1::QueryOptions& in) {
  coordinator::QueryOptions o;
  if (!in.method().empty()) {
    auto method = coordinator::parse_method(in.method());
    if (!method) return method.error();
    o.method = *method;
  }
  if (in.rounds() > 0) o.rounds = in.rounds();
  if (!in.split().empty()) {
    auto split = privacy::parse_split_schedule(in.split());
    if (!split) return split.error();
    o.split = *split;
  }
  if (in.beta() != 0) o.beta = in.beta();
  o.shift = !in.no_shift();
  return o;
}

Expected<std::pair<coordinator::AccuracyTarget, coordinator::AccuracyFirstOptions>>
accuracy_options(const v1::QueryOptions& in, const v1::AccuracyTarget& wire,
                 const coordinator::QueryOptions& query, std::size_t users_not_asked,
                 bool needs_target) {
  if (in.rounds() != 0 || !in.split().empty())
    return make_error(ErrorCode::invalid_argument, "rounds",
                      "rounds and split do not apply to accuracy-first queries: set "
                      "accuracy.max_rounds and accuracy.growth");
  CGP_RETURN_IF_ERROR(validate_accuracy(wire, needs_target));
  coordinator::AccuracyFirstOptions o;
  o.method = query.method;
  if (wire.max_rounds() > 0) o.max_rounds = wire.max_rounds();
  if (wire.growth() != 0) o.growth = wire.growth();
  o.first = wire.first();
  o.beta = query.beta;
  o.shift = query.shift;
  o.query_id = query.query_id;
  o.component_id = query.component_id;
  o.shard = query.shard;
  // Users the adaptive allocation left out as spent are users of the query all the same: the
  // certified interval leaves room for each of them.
  o.users_not_asked = users_not_asked;
  return std::pair{coordinator::AccuracyTarget{wire.relative(), wire.absolute()}, o};
}

Status run_range_count(const v1::RangeCountQuery& request, const QueryWork& work,
                       v1::QueryResult& result) {
  auto range = wire::region_from_wire(request.range());
  if (!range) return range.error();
  if (request.has_accuracy()) {
    CGP_ASSIGN_OR_RETURN(
        const auto accuracy,
        accuracy_options(request.options(), request.accuracy(), work.query, work.users_not_asked));
    CGP_ASSIGN_OR_RETURN(const auto certified, coordinator::range_count_to_accuracy(
                                                   work.fleet, work.mirror, *range, work.charges,
                                                   accuracy.first, accuracy.second));
    fill_certificate(certified, work.ids, result);
    return {};
  }
  auto counted =
      coordinator::range_count(work.fleet, work.mirror, *range, work.charges, work.query);
  if (!counted) return counted.error();
  result.set_estimate(counted->estimate);
  fill_report(counted->report, work.ids, result);
  return {};
}

Status run_kde(const v1::KdeQuery& request, const QueryWork& work, v1::QueryResult& result) {
  const std::vector<double> p(request.point().begin(), request.point().end());
  if (request.has_accuracy()) {
    CGP_ASSIGN_OR_RETURN(
        const auto accuracy,
        accuracy_options(request.options(), request.accuracy(), work.query, work.users_not_asked));
    CGP_ASSIGN_OR_RETURN(const auto certified, coordinator::kde_to_accuracy(
                                                   work.fleet, work.mirror, p, request.bandwidth(),
                                                   work.charges, accuracy.first, accuracy.second));
    fill_certificate(certified, work.ids, result);
    return {};
  }
  auto density =
      coordinator::kde(work.fleet, work.mirror, p, request.bandwidth(), work.charges, work.query);
  if (!density) return density.error();
  result.set_estimate(density->estimate);
  fill_report(density->report, work.ids, result);
  return {};
}

Status run_knn(const v1::KnnQuery& request, const QueryWork& work, v1::QueryResult& result) {
  const std::vector<double> p(request.point().begin(), request.point().end());
  auto found = coordinator::knn(work.fleet, work.mirror, p, request.k(), work.charges, work.query);
  if (!found) return found.error();
  // Neighbours are global ids already (the engine ranks by them across shards).
  for (auto u : found->neighbours) {
    result.add_neighbour_users(u);
    if (work.device_id_of) result.add_neighbours(work.device_id_of(u));
  }
  fill_report(found->report, work.ids, result);
  return {};
}

}  // namespace cgp::transport::detail

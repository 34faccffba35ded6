#include "query_runner.hpp"

#include "analyst_validation.hpp"
#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::transport::detail {

namespace {

constexpr double kDefaultMinCoverage = 0.9;
constexpr double kDefaultMaxMissingShare = 0.1;

// What the users who did not answer allow (MissingUsers in service.proto): `engine_users`, the
// users the engine divided by (KDE), `k` the neighbours a kNN asked for.
v1::MissingUsers missing_of(const v1::QueryResult& result, std::string_view kind,
                            std::size_t engine_users, std::uint32_t k, double max_share) {
  v1::MissingUsers out;
  const std::uint32_t users = result.coverage().users();
  const std::uint32_t missing = users - result.coverage().answered();
  const auto m = static_cast<double>(missing);
  out.set_users(missing);
  double lower = 0, upper = m, share = users > 0 ? m / static_cast<double>(users) : 0;
  if (kind == "range") {
    lower = result.estimate();
    upper = lower + m;
  } else if (kind == "kde" && users > 0) {
    const double kernels = result.estimate() * static_cast<double>(engine_users);
    lower = kernels / static_cast<double>(users);
    upper = (kernels + m) / static_cast<double>(users);
  } else if (kind == "knn" && k > 0) {
    upper = std::min(m, static_cast<double>(k));
    share = upper / static_cast<double>(k);
  }
  if (kind == "range" || kind == "kde") share = upper > 0 ? (upper - lower) / upper : 0;
  // An estimate that is not a number says nothing: all of it is unknown.
  if (!(std::isfinite(lower) && std::isfinite(upper) && std::isfinite(share))) share = 1;
  out.set_lower(lower);
  out.set_upper(upper);
  out.set_share(share);
  out.set_max_share(max_share);
  out.set_valid(share <= max_share);
  return out;
}

// Every user of the query once: refused, else rejected, else unanswered, else answered.
// `users`: the query's users (empty = all `enrolled`).
v1::Coverage coverage_of(const v1::QueryResult& result, std::span<const coordinator::UserId> users,
                         std::size_t enrolled, double min_coverage) {
  // 1: a user of this query not yet counted; 0: counted, or not part of the query.
  std::vector<char> open(enrolled, users.empty() ? 1 : 0);
  for (auto u : users) open[u] = 1;
  const auto queried = static_cast<std::uint32_t>(std::count(open.begin(), open.end(), 1));
  v1::Coverage out;
  auto count = [&](const auto& list) {
    std::uint32_t n = 0;
    for (auto u : list) {
      if (u < enrolled && open[u]) {
        open[u] = 0;
        ++n;
      }
    }
    return n;
  };
  out.set_refused(count(result.refused()));
  out.set_rejected(count(result.rejected()));
  out.set_unanswered(count(result.unanswered()));
  out.set_users(queried);
  out.set_answered(queried - out.refused() - out.rejected() - out.unanswered());
  out.set_min_coverage(min_coverage);
  out.set_valid(static_cast<double>(out.answered()) >= min_coverage * static_cast<double>(queried));
  return out;
}

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

void judge_result(const v1::QueryOptions& in, std::string_view kind,
                  std::span<const coordinator::UserId> subject, std::size_t enrolled,
                  std::size_t engine_users, std::uint32_t k, v1::QueryResult& out) {
  const double min_coverage = in.has_min_coverage() ? in.min_coverage() : kDefaultMinCoverage;
  // Users whose replies could not count are a coverage and an interval, never an estimate
  // that looks fine.
  *out.mutable_coverage() = coverage_of(out, subject, enrolled, min_coverage);
  *out.mutable_missing() =
      missing_of(out, kind, engine_users, k,
                 in.has_max_missing_share() ? in.max_missing_share() : kDefaultMaxMissingShare);
}

Status judged_status(const v1::QueryResult& out, const std::string& query_id) {
  if (!out.coverage().valid()) {
    const auto& c = out.coverage();
    return make_error(ErrorCode::incomplete_query, "min_coverage",
                      "only " + std::to_string(c.answered()) + " of " + std::to_string(c.users()) +
                          " users answered (refused " + std::to_string(c.refused()) +
                          ", rejected " + std::to_string(c.rejected()) + ", unanswered " +
                          std::to_string(c.unanswered()) + "), below min_coverage " +
                          format_number(c.min_coverage()) + ": query " + query_id +
                          " has no valid estimate (GetResult shows what was reached)");
  }
  if (!out.missing().valid()) {
    const auto& m = out.missing();
    return make_error(ErrorCode::incomplete_query, "max_missing_share",
                      std::to_string(m.users()) + " users did not answer: the answer lies in [" +
                          format_number(m.lower()) + ", " + format_number(m.upper()) +
                          "] as far as they go, a share " + format_number(m.share()) +
                          " above max_missing_share " + format_number(m.max_share()) + ": query " +
                          query_id + " has no valid estimate (GetResult shows what was reached)");
  }
  return {};
}

}  // namespace cgp::transport::detail

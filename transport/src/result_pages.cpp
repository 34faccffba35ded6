#include "result_pages.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace cgp::transport::detail {
namespace {

using Ids = google::protobuf::RepeatedField<std::uint32_t>;
constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();  // past every user

// The index lists of a result, in one order everywhere.
std::array<const Ids*, 4> id_lists(const v1::QueryResult& r) {
  return {&r.refused(), &r.rejected(), &r.unanswered(), &r.not_reached()};
}
std::array<Ids*, 4> id_lists(v1::QueryResult& r) {
  return {r.mutable_refused(), r.mutable_rejected(), r.mutable_unanswered(),
          r.mutable_not_reached()};
}

}  // namespace

void sort_user_lists(v1::QueryResult& result) {
  for (auto* ids : id_lists(result)) std::sort(ids->begin(), ids->end());
  auto* charges = result.mutable_charges();
  std::sort(charges->begin(), charges->end(),
            [](const v1::UserCharge& a, const v1::UserCharge& b) { return a.user() < b.user(); });
}

void result_page(const v1::QueryResult& full, std::uint32_t from, std::size_t max_entries,
                 v1::QueryResult& page) {
  page = full;
  page.clear_charges();
  for (auto* ids : id_lists(page)) ids->Clear();
  page.set_users_from(from);
  // A cursor into each list (the four index lists, then the charges), at the first user >= from.
  const auto ids = id_lists(full);
  std::array<int, 5> at{};
  for (std::size_t l = 0; l < ids.size(); ++l)
    at[l] =
        static_cast<int>(std::lower_bound(ids[l]->begin(), ids[l]->end(), from) - ids[l]->begin());
  const auto& charges = full.charges();
  at[4] = static_cast<int>(
      std::lower_bound(charges.begin(), charges.end(), from,
                       [](const v1::UserCharge& c, std::uint32_t u) { return c.user() < u; }) -
      charges.begin());
  auto user_at = [&](std::size_t l) -> std::uint64_t {
    if (l < 4) return at[l] < ids[l]->size() ? (*ids[l])[at[l]] : kNone;
    return at[4] < charges.size() ? charges[at[4]].user() : kNone;
  };
  std::size_t taken = 0;
  std::uint64_t next = kNone;
  for (;;) {
    std::uint64_t user = kNone;
    for (std::size_t l = 0; l < 5; ++l) user = std::min(user, user_at(l));
    if (user == kNone) break;  // every list is through: the last page
    std::size_t entries = 0;
    for (std::size_t l = 0; l < 5; ++l)
      while (user_at(l) == user) {
        ++at[l];
        ++entries;
      }
    if (taken > 0 && taken + entries > max_entries) {
      next = user;
      break;
    }
    taken += entries;
    const auto u = static_cast<std::uint32_t>(user);
    auto out = id_lists(page);
    for (std::size_t l = 0; l < 4; ++l)
      for (int k = at[l] - 1; k >= 0 && (*ids[l])[k] == u; --k) out[l]->Add(u);
    for (int k = at[4] - 1; k >= 0 && charges[k].user() == u; --k) *page.add_charges() = charges[k];
  }
  page.set_users_next(next == kNone ? 0 : static_cast<std::uint32_t>(next));
}

}  // namespace cgp::transport::detail

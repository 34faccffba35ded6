// Pages of a stored query result: the per-user lists of a query that touched
// many users (charges, refused, rejected, unanswered, not_reached) go out in windows of user
// indices with a bounded number of entries, so that no message grows with the fleet.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {

// Every per-user list ascending by user index (pages are windows of user indices).
void sort_user_lists(v1::QueryResult& result);

// The page of `full` (lists sorted) that starts at user `from`: everything but the per-user
// lists as in `full`, and the lists' entries of users [from, next), where next is as far as
// max_entries entries allow (at least one user's entries, however many) and is 0 when the page
// reaches the end.
void result_page(const v1::QueryResult& full, std::uint32_t from, std::size_t max_entries,
                 v1::QueryResult& page);

}  // namespace cgp::transport::detail

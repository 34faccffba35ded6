// The store's schema as numbered migrations (cluster_store.cpp applies the missing ones).
#pragma once

#include <span>
#include <string_view>

namespace cgp::cluster::detail {

// migrations()[v - 1] brings a database from version v - 1 to v.
std::span<const std::string_view> migrations();

}  // namespace cgp::cluster::detail

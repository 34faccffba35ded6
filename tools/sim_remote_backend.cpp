#include "sim_remote_backend.hpp"

#include <cstdio>
#include <random>

namespace cgp::sim {

RemoteBackend::RemoteBackend(transport::AnalystClient client, std::size_t users)
    : client_(std::move(client)), users_(users) {
  std::random_device entropy;
  char tag[17];
  std::snprintf(tag, sizeof tag, "%08x%08x", entropy(), entropy());
  run_tag_ = tag;
}

coordinator::QueryOptions RemoteBackend::named(const coordinator::QueryOptions& o) {
  coordinator::QueryOptions out = o;
  out.query_id = "sim-" + o.query_id + "-" + run_tag_ + "-" + std::to_string(next_++);
  return out;
}

Expected<coordinator::CountResult> RemoteBackend::range_count(const geometry::Region& range,
                                                              double rho,
                                                              const coordinator::QueryOptions& o) {
  auto remote = client_.range_count(range, rho, named(o));
  if (!remote) return remote.error();
  return coordinator::CountResult{remote->estimate, std::move(remote->report)};
}

Expected<coordinator::KdeResult> RemoteBackend::kde(std::span<const double> p, double bandwidth,
                                                    double rho,
                                                    const coordinator::QueryOptions& o) {
  auto remote = client_.kde(p, bandwidth, rho, named(o));
  if (!remote) return remote.error();
  return coordinator::KdeResult{remote->estimate, std::move(remote->report)};
}

Expected<coordinator::KnnResult> RemoteBackend::knn(std::span<const double> p, std::size_t k,
                                                    double rho,
                                                    const coordinator::QueryOptions& o) {
  auto remote = client_.knn(p, k, rho, named(o));
  if (!remote) return remote.error();
  return coordinator::KnnResult{std::move(remote->neighbours), std::move(remote->report)};
}

}  // namespace cgp::sim

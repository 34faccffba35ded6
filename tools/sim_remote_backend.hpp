// cgp-sim --fleet: the experiments' queries sent to a live coordinator through its Analyst API.
#pragma once

#include <string>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/experiments/backend.hpp"

namespace cgp::experiments {

class RemoteBackend final : public QueryBackend {
 public:
  // curator: the device id threshold queries go to (empty: threshold is refused).
  RemoteBackend(analyst::AnalystClient client, std::size_t users, std::string curator = {});
  std::size_t size() const override { return users_; }
  void start_repetition(std::uint64_t, double) override {}
  Expected<coordinator::CountResult> range_count(const geometry::Region& range,
                                                 const coordinator::UserCharges& charges,
                                                 const coordinator::QueryOptions& o) override;
  Expected<coordinator::KdeResult> kde(std::span<const double> p, double bandwidth,
                                       const coordinator::UserCharges& charges,
                                       const coordinator::QueryOptions& o) override;
  Expected<coordinator::KnnResult> knn(std::span<const double> p, std::size_t k,
                                       const coordinator::UserCharges& charges,
                                       const coordinator::QueryOptions& o) override;
  Expected<std::vector<coordinator::CountResult>> adaptive_range_counts(
      std::span<const geometry::Region> ranges, double budget,
      const coordinator::QueryOptions& o) override;
  Expected<coordinator::ThresholdResult> threshold(double q, double population,
                                                   coordinator::Charge cap,
                                                   const coordinator::QueryOptions& o) override;

 private:
  // Query ids are unique per coordinator: the experiment's name, this run's tag, a counter.
  coordinator::QueryOptions named(const coordinator::QueryOptions& o);
  analyst::AnalystClient client_;
  std::size_t users_;
  std::string curator_;
  std::string run_tag_;
  std::uint64_t next_ = 1;
};

}  // namespace cgp::experiments

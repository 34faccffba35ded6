// The gateway's counters (GatewayCounters) behind their own lock: every part of the gateway
// adds to them, status calls and metric scrapes read a copy.
#pragma once

#include <mutex>

#include "cgp/transport/gateway.hpp"

namespace cgp::transport::detail {

class CounterBoard {
 public:
  template <class Update>
  void update(Update&& update) {
    std::lock_guard lock(mutex_);
    update(counts_);
  }
  GatewayCounters snapshot() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  mutable std::mutex mutex_;
  GatewayCounters counts_;
};

}  // namespace cgp::transport::detail

#include "cgp/transport/grpc_runtime.hpp"

#include <absl/synchronization/mutex.h>

namespace cgp::transport {

void turn_off_lock_order_graph() noexcept {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace cgp::transport

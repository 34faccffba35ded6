#include "cgp/protocol/grpc_runtime.hpp"

#include <absl/synchronization/mutex.h>

namespace cgp::protocol {

void turn_off_lock_order_graph() noexcept {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace cgp::protocol

// Process-wide settings of the gRPC runtime that every network program applies first.
#pragma once

namespace cgp::protocol {

// Turns off Abseil's lock-order ("deadlock") graph for this process. Debian's libabsl is built
// without NDEBUG, so every absl::Mutex that gRPC locks also takes one global spinlock and records
// stack traces into a process-wide graph: at 16,000 devices that lock serialises every gRPC thread
// (the coordinator's "16-core stall"), and a false cycle aborts the process
// (grpc/grpc#40390). A release build of Abseil has it off already; this makes ours match.
// Call once, at the start of main, before any gRPC object exists. Library code never calls it:
// a host application owns its process's settings.
void turn_off_lock_order_graph() noexcept;

}  // namespace cgp::protocol

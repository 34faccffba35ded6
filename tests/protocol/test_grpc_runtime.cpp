// The gRPC runtime settings every network program applies (cgp/protocol/grpc_runtime.hpp).
#include <absl/synchronization/mutex.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "cgp/protocol/grpc_runtime.hpp"

namespace {

// Locks two mutexes in one order and then the other, in a child process: a lock-order graph that
// is on reports the (harmless, single-thread) cycle and aborts the child. Returns the child's
// wait status.
int lock_in_both_orders_in_a_child(bool turn_off_first) {
  const pid_t child = fork();
  if (child == 0) {
    if (turn_off_first) cgp::protocol::turn_off_lock_order_graph();
    absl::Mutex a, b;
    a.Lock();
    b.Lock();
    b.Unlock();
    a.Unlock();
    b.Lock();
    a.Lock();
    a.Unlock();
    b.Unlock();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("grpc runtime: the lock-order graph is off in the network programs' setting",
          "[grpc_runtime]") {
  // With the graph on (Debian's Abseil is built without NDEBUG), every absl::Mutex lock takes one
  // process-wide spinlock, and an order inversion aborts the process.
  const int with_graph = lock_in_both_orders_in_a_child(false);
  const bool graph_was_on = !(WIFEXITED(with_graph) && WEXITSTATUS(with_graph) == 0);
  INFO("this Abseil build keeps a lock-order graph by default: " << (graph_was_on ? "yes" : "no"));
  const int turned_off = lock_in_both_orders_in_a_child(true);
  REQUIRE(WIFEXITED(turned_off));
  CHECK(WEXITSTATUS(turned_off) == 0);
}

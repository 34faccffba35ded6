// Internals of DeviceGateway, shared by the device sessions and NetworkFleet.
//
// Threading: device streams run on gRPC's completion-queue API, spread over a fixed set of
// queues with a thread each (no thread per device); the listening socket is accepted on one
// thread of ConnectionAdmission; analyst calls run on gRPC's sync pool.
// The gateway's state is in parts that own their locks: the session registry (who is connected,
// who is revoked, who presents which credential), the round table (where replies go), the Hello
// watchdog (streams that have not introduced themselves) and the counters. GatewayCore wires them
// to gRPC; it has no lock.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cgp/transport/gateway.hpp"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "check_in_mailbox.hpp"
#include "connection_admission.hpp"
#include "device_session.hpp"
#include "device_stream.hpp"
#include "frame_listener.hpp"
#include "gateway_counters.hpp"
#include "health_service.hpp"
#include "hello_watchdog.hpp"
#include "reflection_service.hpp"
#include "refusal_log.hpp"
#include "round_table.hpp"
#include "session_registry.hpp"
#include "watch_board.hpp"

namespace cgp::transport::detail {

// What a stream does after a device's message (GatewayCore::on_message).
struct MessageOutcome {
  std::optional<grpc::Status> end;   // set: end the stream with this status
  std::uint32_t retry_after_ms = 0;  // with it: come back no sooner than this
  bool attached = false;             // the Hello was accepted: the stream is the device's now
};

class GatewayCore {
 public:
  explicit GatewayCore(const GatewayOptions& options);

  // Serving: a thread per completion queue, each with streams waiting for devices.
  void serve();
  // Ends every stream (a Goodbye first, with its device's delay), stops the server and joins
  // the queue threads; the plan the Goodbyes gave. Once.
  ReconnectPlan shutdown();

  // What a session reports. admit: checks a Hello (the error is the status the stream finishes
  // with), and says which credential it was admitted with; attach: the Hello was accepted;
  // detach: the stream is gone; deliver: a reply came.
  grpc::Status admit(const v1::Hello& hello, std::optional<CredentialSha256>& admitted_with,
                     std::uint32_t& retry_after_ms);
  // False: refused (revoked, or its credential changed since admit), the stream ends.
  bool attach(const std::shared_ptr<DeviceStream>& session,
              const std::optional<CredentialSha256>& admitted_with);
  void detach(const std::shared_ptr<DeviceStream>& session);
  void deliver(const std::string& device_id, const v1::DeviceReply& reply);
  // A stream accepted from `address` waits for its Hello; false: refused (a cap is reached).
  bool await_hello(const std::shared_ptr<DeviceStream>& session, const std::string& address);
  // A device out from now on; false when it was out before.
  bool revoke(const std::string& device_id);
  // A device admitted with this credential from now on (DeviceGateway::enrol).
  DeviceGateway::Enrolled enrol(const std::string& device_id, const CredentialSha256& digest);

  // One message from a device, whichever transport carried it: a Hello first (checked,
  // Welcomed, attached), then replies, watch answers and Goodbye (docs/protocol.md §4). Called on
  // the stream's own thread, one message at a time.
  MessageOutcome on_message(const std::shared_ptr<DeviceStream>& stream,
                            const v1::DeviceToCoordinator& message);
  // A message (or frame) that does not parse: logged at the refusal log's rate; the status to
  // end the stream with (INVALID_ARGUMENT).
  grpc::Status refuse_malformed(const DeviceStream& stream, const std::string& what);

  void log(const std::string& line) const {
    if (log_sink_) log_sink_(line);
  }
  // A refusal: rate-limited per reason (refusal_log.hpp), so that a flood cannot flood the log.
  void log_refused(std::string_view reason, const std::string& line) {
    refusals_.refused(reason, line);
  }
  template <class MakeLine>
  void log_refused_built(std::string_view reason, MakeLine&& make_line) {
    refusals_.refused_built(reason, std::forward<MakeLine>(make_line));
  }

  const std::optional<geometry::LocationFrame> frame;  // GatewayOptions::frame
  SessionRegistry sessions;
  RoundTable rounds;
  CheckInMailbox mailbox;  // requests for check-in devices that are not connected
  HelloWatchdog hellos;
  CounterBoard counters;
  WatchBoard watches;
  mutable std::mutex recent_rounds_mutex;
  std::deque<RoundSummary> recent_rounds;  // the latest DeviceGateway::kRecentRounds
  // The round waiting for replies (DeviceGateway::round_in_progress), under the same lock.
  std::shared_ptr<PendingRound> waiting_round;
  RoundSummary waiting_summary;
  std::chrono::steady_clock::time_point waiting_since;

  // Streams are spread over several completion queues: Debian's libgrpc keeps gRPC's debug
  // check of outstanding operations, a linear scan of the queue's pending tags at every
  // completion, so one queue with n connected devices costs O(n) per reply.
  // Raw bytes, parsed by the session: gRPC reports a message that does not parse as the end of
  // the stream, indistinguishable from a half-close, so the device would get OK.
  v1::DeviceGateway::WithRawMethod_Connect<v1::DeviceGateway::Service> device_service;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  // gRPC sessions holding themselves alive (an operation of theirs may be in flight): a queue
  // is shut down only once this is 0, since an operation started on a shut-down queue (a
  // Finish after a Goodbye's write completes) aborts the process.
  std::atomic<std::size_t> live_grpc_sessions{0};
  std::vector<std::thread> queue_threads;
  std::vector<std::unique_ptr<grpc::Service>> endpoints;  // further services (analyst)
  // Health and reflection, bounded: made before the server, destroyed after it.
  std::unique_ptr<HealthService> health;
  std::unique_ptr<ReflectionService> reflection;
  std::unique_ptr<ConnectionAdmission> admission;  // the listening socket
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<FrameListener> frames;       // the lean device transport, when served
  std::size_t reconnect_rate = 0;              // GatewayOptions::reconnect_rate
  std::optional<ReconnectPlan> previous_stop;  // GatewayOptions::previous_stop
  std::uint32_t virtual_shards = 0;            // GatewayOptions::virtual_shards
  std::vector<char> served_shard;              // by shard: GatewayOptions::served_shards
  ReconnectPlan plan;                          // this one's, given at shutdown
  bool stopped = false;
  int port = 0;

 private:
  std::function<void(const std::string&)> log_sink_;
  RefusalLog refusals_{log_sink_};
};

}  // namespace cgp::transport::detail

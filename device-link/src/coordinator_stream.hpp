// A device's stream to its coordinator, whichever transport carries it (gRPC, or the lean TLS
// frames of docs/protocol.md §2b): serve_device speaks to this, so both transports answer with
// the same code. One reader thread; writes from several threads, one at a time (the caller
// serializes them); cancel() from any thread.
#pragma once

#include <grpcpp/support/status.h>
#include <grpcpp/support/string_ref.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/v1/cgp.pb.h"

namespace cgp::link::detail {

class CoordinatorStream {
 public:
  virtual ~CoordinatorStream() = default;
  // False once the stream is broken or ended (nothing more can be sent).
  virtual bool write(const v1::DeviceToCoordinator& message) = 0;
  // The next message; false when the stream ended (by the coordinator, the network or cancel).
  virtual bool read(v1::CoordinatorToDevice& message) = 0;
  // Ends the stream from this side: a blocked read returns false. Any thread, any number of times.
  virtual void cancel() = 0;
  // After read returned false (or cancel): says the device is done sending, and how the
  // coordinator ended the stream — ok, or the error it named (`peer` names a failure of the
  // network itself). unauthenticated means the credential was refused.
  virtual Status finish(const std::string& peer) = 0;
  // The coordinator's "come back after" on its end of the stream (0: none given).
  virtual std::chrono::milliseconds retry_after() const { return std::chrono::milliseconds(0); }
};

// The address a session dials and the name it dials it by (TLS name and SNI): the template
// filled with the device's shard, and connect_to when set. Checked by check_dial_target.
struct DialTarget {
  std::string name_address, dial_address;
};
DialTarget dial_target(const DeviceConnection& connection);
// Errors name "coordinator_address" (a template that cannot be filled) or "connect_to".
Status check_dial_target(const DeviceConnection& connection);
// "host" of "host:port" ("[v6]:port" without brackets); false when it is not of that shape.
bool split_address(const std::string& address, std::string& host, std::string& port);

// Dials: the stream is open (TCP and TLS done for frames) or an error says why (unavailable,
// naming "coordinator"; "tls" for a root certificate that is not PEM).
Expected<std::unique_ptr<CoordinatorStream>> dial_grpc(const DeviceConnection& connection);
Expected<std::unique_ptr<CoordinatorStream>> dial_frames(const DeviceConnection& connection);

// How the coordinator ended a stream, as a device sees it: ok (also for CANCELLED: this side
// ended it), unauthenticated naming "credential", else the named error the status stands for.
Status ended_status(const grpc::Status& status,
                    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                    const std::string& peer);

// What one session of serve_device ended with, and when the coordinator asked to be dialled
// again (Goodbye.retry_after_ms or StreamEnd.retry_after_ms; 0: at the device's own pace).
struct SessionEnd {
  SessionEnd() = default;
  SessionEnd(Error error) : status(std::move(error)) {}  // NOLINT implicit, as Status
  SessionEnd(Status ended, std::chrono::milliseconds after)
      : status(std::move(ended)), retry_after(after) {}
  Status status;
  std::chrono::milliseconds retry_after{0};
};
SessionEnd serve_session(const DeviceConnection& connection, client::Device& device);

}  // namespace cgp::link::detail

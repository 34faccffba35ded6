// One device's connection as the gateway sees it, whichever transport carries it: a gRPC stream
// (device_session.hpp) or a TLS frames connection (frame_session.hpp). The registry, the round
// table and the Hello watchdog hold streams by this interface; pushing to a device is a network
// write either way, so the virtual call is not what a round's push costs.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>

#include "cgp/v1/cgp.pb.h"

namespace cgp::transport::detail {

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // The device id, once its Hello was accepted (fixed from then on).
  const std::string& id() const noexcept { return id_; }
  // What the device said it runs (Hello.sdk_version; may be empty), fixed with the id.
  const std::string& sdk_version() const noexcept { return sdk_version_; }
  // Any thread. False when the stream is finishing or gone (nothing was sent).
  virtual bool push(v1::CoordinatorToDevice message) = 0;
  // Any thread: ends the stream with `status` (once; later calls do nothing), and with a
  // "come back after" when retry_after_ms > 0 (gRPC: trailer cgp-retry-after-ms; frames:
  // StreamEnd.retry_after_ms).
  virtual void finish(grpc::Status status, std::uint32_t retry_after_ms = 0) = 0;

  // GatewayCore::on_message, when the device's Hello is accepted (its transport's own thread).
  void introduce(std::string id, std::string sdk_version) {
    id_ = std::move(id);
    sdk_version_ = std::move(sdk_version);
  }

 protected:
  DeviceStream() = default;
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

 private:
  std::string id_, sdk_version_;
};

}  // namespace cgp::transport::detail

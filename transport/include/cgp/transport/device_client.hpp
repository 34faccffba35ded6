// A device's side of the network: dial the coordinator, say Hello, answer every pushed request
// with client::Device::handle (the device's own filter, charge and noise), until the stream ends.
#pragma once

#include <chrono>
#include <string>

#include "cgp/client/device.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::transport {

struct DeviceConnection {
  std::string coordinator_address;  // host:port
  std::string device_id;
  std::string credential;            // sent in Hello; checked by the coordinator
  std::string tls_root_certificate;  // PEM; empty = plaintext
  // Fault tests: wait this long before sending each reply (a slow device).
  std::chrono::milliseconds reply_delay{0};
};

// Blocks until the coordinator closes the stream or the connection fails; a refused connection
// (wrong credential) is an error naming it.
Status serve_device(const DeviceConnection& connection, client::Device& device);
// Plaintext, no credential.
Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device);

}  // namespace cgp::transport

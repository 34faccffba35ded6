// A device's side of the network: dial the coordinator, say Hello, answer every pushed request
// with client::Device::handle (the device's own filter, charge and noise), until the stream ends.
#pragma once

#include <string>

#include "cgp/client/device.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::transport {

// Blocks until the coordinator closes the stream or the connection fails.
Status serve_device(const std::string& coordinator_address, const std::string& device_id,
                    client::Device& device);

}  // namespace cgp::transport

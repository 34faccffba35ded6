// The services' descriptors as the generated pool holds them (what server reflection serves).
#pragma once

#include <google/protobuf/descriptor.h>

namespace cgp::protocol {

// cgp.v1.DeviceGateway. Calling this also links device_gateway.pb into a static build: gRPC's
// generated service code does not reference it, so a coordinator would serve the service while
// reflection could not describe it.
const google::protobuf::ServiceDescriptor& device_gateway_descriptor();

}  // namespace cgp::protocol

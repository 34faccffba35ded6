#include "cgp/protocol/service_descriptors.hpp"

#include "cgp/v1/device_gateway.pb.h"

namespace cgp::protocol {

const google::protobuf::ServiceDescriptor& device_gateway_descriptor() {
  // The file is looked up by the name its descriptor table holds: that use of the table is
  // what links device_gateway.pb (and so registers the file) in a static build.
  static const google::protobuf::ServiceDescriptor* service = [] {
    const auto* file = google::protobuf::DescriptorPool::generated_pool()->FindFileByName(
        descriptor_table_cgp_2fv1_2fdevice_5fgateway_2eproto.filename);
    return file->FindServiceByName("DeviceGateway");
  }();
  return *service;  // both are in the generated file: never null
}

}  // namespace cgp::protocol

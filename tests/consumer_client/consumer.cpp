// A device app against an installed client-only cgpkit: open a device, set its location,
// answer one request from the wire, replay it (charged once).
#include <cgp/client/device.hpp>
#include <cgp/common/wire/codec.hpp>
#include <cstdio>
#include <vector>

int main() {
  auto config = cgp::DeviceConfig::cgp(1e-2);
  if (!config) return 1;
  auto device = cgp::client::Device::open_secure(*config, nullptr);
  if (!device || !device->register_component("location", 2, "m")) return 1;
  const std::vector<double> here{120.5, -30.25};
  if (!device->set_component("location", here)) return 1;
  auto request = cgp::DeviceRequest::location({"q", 1}, "location", 1e-3);
  if (!request) return 1;
  const std::string bytes = cgp::wire::serialize(cgp::wire::request_to_wire(*request));
  const std::span wire(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  const std::string reply = device->handle(wire);
  const double spent = device->spent();
  if (reply.empty() || device->handle(wire) != reply || device->spent() != spent) return 1;
  if (!(spent > 0) || !device->secure_randomness()) return 1;
  std::printf("cgpkit consumer ok: reply %zu bytes, spent %.6g\n", reply.size(), spent);
  return 0;
}

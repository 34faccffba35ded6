#include "cgp/simulation/device_fleet.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#include "cgp/common/parallel.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::simulation {

using namespace coordinator;

struct DeviceFleet::State {
  DeviceConfig config;
  std::size_t dimension = 0;
  std::vector<client::Device> devices;
  unsigned threads = 1;
};

DeviceFleet::DeviceFleet(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceFleet::DeviceFleet(DeviceFleet&&) noexcept = default;
DeviceFleet& DeviceFleet::operator=(DeviceFleet&&) noexcept = default;
DeviceFleet::~DeviceFleet() = default;

Expected<DeviceFleet> DeviceFleet::create(const DeviceConfig& config,
                                          std::span<const double> points, std::size_t dimension,
                                          std::uint64_t seed, unsigned threads) {
  CGP_RETURN_IF_ERROR(validate_fleet_points(points, dimension));
  auto state = std::make_unique<State>();
  state->config = config;
  state->dimension = dimension;
  state->threads = threads ? threads : default_threads();
  const std::size_t n = points.size() / dimension;
  state->devices.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    // One stream per user from the run seed: independent of threads and of other users.
    auto device = client::Device::open_for_simulation(config, seed, i);
    CGP_RETURN_IF_ERROR(device.register_component("location", dimension));
    CGP_RETURN_IF_ERROR(device.set_component("location", points.subspan(i * dimension, dimension)));
    state->devices.push_back(std::move(device));
  }
  return DeviceFleet(std::move(state));
}

std::size_t DeviceFleet::size() const noexcept {
  return state_->devices.size();
}
std::size_t DeviceFleet::dimension() const noexcept {
  return state_->dimension;
}
double DeviceFleet::initial_budget() const noexcept {
  return state_->config.rho_capacity();
}
client::Device& DeviceFleet::device(UserId user) noexcept {
  return state_->devices[user];
}

void DeviceFleet::ask(const RoundRequest& request, RoundReplies& replies) {
  State& s = *state_;
  const std::size_t out_dim =
      request.statistic == StatisticKind::location ? s.dimension : std::size_t{1};
  const std::size_t asked = request.users.size();
  replies.resize(asked, out_dim);
  parallel_chunks(asked, s.threads, [&](std::size_t begin, std::size_t end, unsigned) {
    for (std::size_t k = begin; k < end; ++k) {
      const UserId user = request.users[k];
      if (user >= s.devices.size()) {
        replies.kind[k] = ReplyKind::rejected;
        continue;
      }
      auto built = device_request_for(request, k);
      if (!built) {
        replies.kind[k] = ReplyKind::rejected;
        continue;
      }
      record_reply(s.devices[user].handle(*built), k, replies);
    }
  });
}

}  // namespace cgp::simulation

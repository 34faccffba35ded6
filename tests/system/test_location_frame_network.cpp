// Location frames over the network: a coordinator with a frame announces it in Welcome and
// stamps it on requests; devices that know only their GPS lon/lat project it on the device and
// are counted where they are; a device with lon/lat cannot serve a coordinator that announces
// no frame (named error, not a wrong answer); and a hostile coordinator's frames tell it
// nothing about where a phone is.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "cgp/v1/device_gateway.grpc.pb.h"
#include "client/device_fixtures.hpp"
#include "network_fixtures.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

TEST_CASE("network: devices given lon/lat are counted in the coordinator's frame",
          "[transport][network][frame]") {
  const auto frame =
      *geometry::LocationFrame::create(geometry::ProjectionKind::local_equidistant, -73.97, 40.75);
  // Three phones within ~600 m of the frame's origin, three 5-10 km away.
  const std::vector<std::array<double, 2>> phones{{-73.968, 40.751}, {-73.975, 40.747},
                                                  {-73.965, 40.754}, {-73.90, 40.75},
                                                  {-74.05, 40.70},   {-73.97, 40.66}};
  transport::GatewayOptions options;
  options.frame = frame;
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  const auto config = *DeviceConfig::cgp(1e4);
  std::vector<client::Device> devices;
  for (std::size_t k = 0; k < phones.size(); ++k)
    devices.push_back(client::Device::open_for_simulation(config, 77, k));
  std::vector<Status> served(phones.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k < phones.size(); ++k) {
      threads.emplace_back([&, k](std::stop_token stop) {
        link::DeviceConnection connection;
        connection.coordinator_address = address;
        connection.device_id = "device-" + std::to_string(k);
        connection.stop = stop;
        connection.lonlat = phones[k];
        served[k] = test::serve_simulated_device(connection, devices[k]);
      });
    }
    REQUIRE(gateway->wait_for_devices(phones.size(), 20s));
    transport::NetworkFleet fleet(*gateway, test::device_ids(phones.size()), 2, 1e4, 10s);
    BudgetMirror mirror(phones.size(), fleet.initial_budget());
    double lo[2] = {-1000, -1000}, hi[2] = {1000, 1000};
    QueryOptions query;
    query.method = Method::BM0;  // point releases: σ = 0.07 m at ρ = 100, margins over 400 m
    query.query_id = "frame-count";
    auto count = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                             UserCharges::everyone(Charge{100}), query);
    REQUIRE(count.has_value());
    CHECK(count->report.unanswered.empty());
    CHECK(count->report.rejected.empty());
    CHECK(std::lround(count->estimate) == 3);
    for (const auto& device : devices) REQUIRE(device.location_frame() == frame);
    for (auto& thread : threads) thread.request_stop();
    gateway.reset();
  }
  for (const auto& status : served) CHECK(status.ok());
}

TEST_CASE("network: a device with lon/lat refuses a coordinator that announces no frame",
          "[transport][network][frame]") {
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1.0), 5, 0);
  link::DeviceConnection connection;
  connection.coordinator_address = "127.0.0.1:" + std::to_string(gateway->port());
  connection.device_id = "device-0";
  connection.lonlat = std::array<double, 2>{-73.97, 40.75};
  const Status served = test::serve_simulated_device(connection, device);
  REQUIRE_FALSE(served.ok());
  CHECK(served.error().parameter == "frame");
  CHECK(device.spent() == 0);
}

namespace {

// A hostile coordinator on the real gRPC link: each session it sends the scripted Welcomes,
// then (if the device is still there) one request stamped with the first Welcome's frame, and
// records everything the device's behaviour tells it.
class ScriptedCoordinator final : public v1::DeviceGateway::Service {
 public:
  struct Session {
    std::vector<std::optional<geometry::LocationFrame>> welcomes;
    std::string query_id;
  };
  struct Seen {
    bool replied = false;
    int status = -1, error = -1;
    double charged = 0;
    friend bool operator==(const Seen&, const Seen&) = default;
  };

  explicit ScriptedCoordinator(std::vector<Session> sessions) : sessions_(std::move(sessions)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedCoordinator() override { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<Seen> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

  grpc::Status Connect(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::CoordinatorToDevice, v1::DeviceToCoordinator>* stream) override {
    v1::DeviceToCoordinator in;
    if (!stream->Read(&in) || !in.has_hello()) return grpc::Status::OK;
    Session session;
    {
      std::lock_guard lock(mutex_);
      if (next_ >= sessions_.size()) return grpc::Status::OK;
      session = sessions_[next_++];
    }
    for (const auto& frame : session.welcomes) {
      v1::CoordinatorToDevice out;
      *out.mutable_welcome()->mutable_frame() = wire::frame_to_wire(frame);
      if (!stream->Write(out)) break;
    }
    v1::CoordinatorToDevice out;
    out.mutable_request()->ParseFromString(test::location_request_bytes(session.query_id, 1, 1e-3));
    *out.mutable_request()->mutable_frame() = wire::frame_to_wire(session.welcomes.front());
    Seen seen;
    if (stream->Write(out) && stream->Read(&in) && in.has_reply()) {
      seen.replied = true;
      seen.status = in.reply().status();
      seen.error = in.reply().error();
      seen.charged = in.reply().charged_rho();
    }
    std::lock_guard lock(mutex_);
    seen_.push_back(seen);
    return grpc::Status::OK;
  }

 private:
  std::vector<Session> sessions_;
  std::mutex mutex_;
  std::size_t next_ = 0;
  std::vector<Seen> seen_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// What one phone at `lonlat` shows the scripted coordinator: each session's end and what it saw.
struct Observed {
  std::vector<std::string> ends;  // "ok", or the error's code and parameter
  std::vector<ScriptedCoordinator::Seen> seen;
  double spent = 0;
};

Observed observe(const std::vector<ScriptedCoordinator::Session>& script,
                 std::array<double, 2> lonlat) {
  ScriptedCoordinator coordinator(script);
  auto device = client::Device::open_secure(*DeviceConfig::cgp(1.0), nullptr);  // a real phone
  REQUIRE(device.has_value());
  Observed observed;
  for (std::size_t k = 0; k < script.size(); ++k) {
    link::DeviceConnection connection;
    connection.coordinator_address = coordinator.address();
    connection.device_id = "phone";
    connection.lonlat = lonlat;
    const Status ended = link::serve_device(connection, *device);
    observed.ends.push_back(ended.ok() ? "ok"
                                       : std::string(error_code_name(ended.error().code)) + " " +
                                             ended.error().parameter);
  }
  observed.seen = coordinator.seen();
  observed.spent = device->spent();
  return observed;
}

}  // namespace

TEST_CASE("network: a hostile coordinator's frames learn nothing about where the phone is",
          "[transport][network][frame][privacy]") {
  // The location-oracle attack: frames whose origin sweeps across the distance where the old 1%
  // stretch check flipped (~1,550 km), Mercator frames (one with its seam at the phone), frames
  // at the antipode; then one session re-framed 150 times. Two phones 1 m apart, and the sweep
  // itself, must see identical outcomes: every local frame answered, every Mercator frame and
  // every second Welcome refused the same way, nothing charged for a refusal.
  const std::array<double, 2> phone{-73.97, 40.75};
  const auto around_phone = *geometry::LonLatProjection::create(
      geometry::ProjectionKind::local_equidistant, phone[0], phone[1]);
  std::vector<ScriptedCoordinator::Session> script;
  for (int step = 0; step < 16; ++step) {
    const double distance = 1.40e6 + step * 2.0e4;  // 1,400 .. 1,700 km west
    const auto origin = *around_phone.inverse(-distance, 0);
    script.push_back({{*geometry::LocationFrame::create(geometry::ProjectionKind::local_equidistant,
                                                        origin[0], origin[1])},
                      "sweep-" + std::to_string(step)});
  }
  script.push_back({{*geometry::LocationFrame::parse("local:106.03,-40.75")}, "antipode"});
  script.push_back({{*geometry::LocationFrame::parse("mercator:-74")}, "mercator"});
  script.push_back({{*geometry::LocationFrame::parse("mercator:106.03")}, "mercator-seam"});
  std::vector<std::optional<geometry::LocationFrame>> reframed(
      150, *geometry::LocationFrame::parse("local:-73.97,40.75"));
  script.push_back({reframed, "reframed"});
  script.push_back({{*geometry::LocationFrame::parse("local:-73.97,40.75")}, "after"});

  const Observed here = observe(script, phone);
  const Observed metre_east = observe(script, {phone[0] + 1.0 / 84300, phone[1]});
  CHECK(here.ends == metre_east.ends);
  CHECK(here.seen == metre_east.seen);
  CHECK(here.spent == metre_east.spent);

  REQUIRE(here.ends.size() == script.size());
  for (int step = 0; step < 16; ++step) {
    INFO("sweep step " << step);
    CHECK(here.ends[step] == "ok");
  }
  CHECK(here.ends[16] == "ok");  // the antipode's frame: folded to its origin, answered
  CHECK(here.ends[17] == "invalid_argument frame.projection");
  CHECK(here.ends[18] == "invalid_argument frame.projection");
  CHECK(here.ends[19] == "invalid_argument welcome");
  CHECK(here.ends[20] == "ok");
  // Seen: the 17 local sessions and the last one replied, answered; the refused ones did not.
  std::size_t answered = 0;
  for (const auto& seen : here.seen) answered += seen.replied && seen.status == v1::ANSWERED;
  CHECK(answered == 18);
  CHECK(here.spent == Approx(18 * privacy::device_charge(1e-3)).epsilon(1e-12));
}

// cgpkit.Device: one user's device — its components, its privacy filter and ledger — for
// notebooks that explore the device contract: what a request costs, when the filter refuses,
// that a replayed request is charged once, the wire bytes a coordinator would exchange.
#include <mutex>
#include <optional>
#include <string>

#include "binding.hpp"
#include "cgp/client/device.hpp"
#include "cgp/common/device_config.hpp"

namespace cgp::python {
namespace {

py::object error_object(const Error& e) {
  return py::module_::import("cgpkit._errors")
      .attr("Error")(std::string(error_code_name(e.code)), e.parameter, e.message);
}

const char* status_name(ReplyStatus status) {
  switch (status) {
    case ReplyStatus::answered:
      return "answered";
    case ReplyStatus::refused_budget:
      return "refused_budget";
    case ReplyStatus::rejected_invalid:
      return "rejected_invalid";
  }
  return "rejected_invalid";
}

class PyDevice {
 public:
  PyDevice(double budget, bool sticky_halt, std::optional<double> delta, std::optional<double> lam,
           std::optional<std::string> ledger, std::optional<std::uint64_t> seed,
           std::uint64_t stream) {
    if (delta.has_value() != lam.has_value())
      raise(make_error(ErrorCode::invalid_argument, delta ? "lam" : "delta",
                       "an (epsilon, delta, Lambda)-GP device needs both delta and lam"));
    const auto config =
        value_or_raise(delta ? DeviceConfig::approximate_gp(budget, *delta, *lam, sticky_halt)
                             : DeviceConfig::cgp(budget, sticky_halt));
    if (seed) {
      if (ledger)
        raise(make_error(ErrorCode::invalid_argument, "seed",
                         "a seeded (simulation) device keeps its ledger in memory: give a "
                         "seed or a ledger path, not both"));
      device_.emplace(client::Device::open_for_simulation(config, *seed, stream));
    } else {
      device_.emplace(
          value_or_raise(client::Device::open_secure(config, ledger ? ledger->c_str() : nullptr)));
    }
  }

  void register_component(const std::string& id, std::size_t dimension, const std::string& unit) {
    std::lock_guard lock(mutex_);
    ok_or_raise(device_->register_component(id, dimension, unit));
  }
  void set_component(const std::string& id, const Points& values) {
    std::lock_guard lock(mutex_);
    ok_or_raise(device_->set_component(id, rows_of(values).first));
  }

  void set_location_frame(const std::string& frame) {
    const auto parsed = value_or_raise(geometry::LocationFrame::parse(frame));
    std::lock_guard lock(mutex_);
    ok_or_raise(device_->set_location_frame(parsed));
  }
  std::optional<std::string> location_frame() const {
    std::lock_guard lock(mutex_);
    const auto& frame = device_->location_frame();
    return frame ? std::optional<std::string>(frame->to_string()) : std::nullopt;
  }
  void set_location_lonlat(const std::string& id, double lon, double lat) {
    std::lock_guard lock(mutex_);
    ok_or_raise(device_->set_location_lonlat(id, lon, lat));
  }

  py::dict location(const std::string& query_id, std::uint32_t round, double rho,
                    const std::string& component) {
    return answer(DeviceRequest::location({query_id, round}, component, rho));
  }
  py::dict distance_to_point(const Points& point, const std::string& query_id, std::uint32_t round,
                             double rho, const std::string& component) {
    return answer(
        DeviceRequest::distance_to_point({query_id, round}, component, vector_of(point), rho));
  }
  py::dict signed_distance_to_region(const Region& region, const std::string& query_id,
                                     std::uint32_t round, double rho,
                                     const std::string& component) {
    return answer(
        DeviceRequest::signed_distance_to_region({query_id, round}, component, region.value, rho));
  }

  py::bytes handle(const py::bytes& request) {
    const std::string bytes = request;
    std::string reply;
    {
      py::gil_scoped_release unlocked;
      std::lock_guard lock(mutex_);  // the device is used by one thread at a time
      reply = device_->handle(
          std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
    }
    return py::bytes(reply);
  }

  double remaining() const {
    std::lock_guard lock(mutex_);
    return device_->remaining();
  }
  double spent() const {
    std::lock_guard lock(mutex_);
    return device_->spent();
  }
  bool secure_randomness() const { return device_->secure_randomness(); }
  std::string filter() const {
    return device_->config().filter() == FilterKind::cgp ? "cgp" : "approximate_gp";
  }
  py::object ledger_error() const {
    std::lock_guard lock(mutex_);
    const Status& status = device_->ledger_status();
    return status ? py::none() : error_object(status.error());
  }

 private:
  // A request the engine would have refused to build is the caller's error (raised); a
  // device's refusal or rejection is its answer (returned, with the error object).
  py::dict answer(Expected<DeviceRequest> request) {
    const DeviceRequest valid = value_or_raise(std::move(request));
    DeviceReply reply;
    {
      py::gil_scoped_release unlocked;  // a paced release waits out its window
      std::lock_guard lock(mutex_);     // the device is used by one thread at a time
      reply = device_->handle(valid);
    }
    py::dict out;
    out["status"] = status_name(reply.status);
    out["values"] =
        py::array_t<double>(static_cast<py::ssize_t>(reply.values.size()), reply.values.data());
    out["charged_rho"] = reply.charged_rho;
    out["remaining_budget"] = reply.remaining_budget;
    out["error"] =
        reply.status == ReplyStatus::rejected_invalid ? error_object(reply.error) : py::none();
    return out;
  }

  // Python threads may share a Device while the GIL is released: one call at a time.
  mutable std::mutex mutex_;
  std::optional<client::Device> device_;
};

}  // namespace

void bind_device(py::module_& m) {
  py::class_<PyDevice>(
      m, "Device",
      "One user's device: its components and its privacy filter (CGP of `budget` in rho, or "
      "(epsilon, delta, Lambda)-GP with `delta` and `lam`). It releases phi(x) + noise, charged "
      "before release; a replayed request (same query id and round) is charged once.\n\n"
      "Without `seed`: secure randomness (libsodium) and a ledger in memory, or in the SQLite "
      "file `ledger` (a second Device on that file is refused while this one is open). A ledger "
      "in memory dies with this object: a new Device starts with the whole budget again, so "
      "for a real user give `ledger` (the budget then survives restarts and crashes). With "
      "`seed`: seeded simulation randomness and an in-memory ledger (as SimulatedFleet's "
      "devices; never for real users). Calls from several Python threads are serialized.")
      .def(py::init<double, bool, std::optional<double>, std::optional<double>,
                    std::optional<std::string>, std::optional<std::uint64_t>, std::uint64_t>(),
           py::arg("budget"), py::arg("sticky_halt") = false, py::arg("delta") = py::none(),
           py::arg("lam") = py::none(), py::arg("ledger") = py::none(),
           py::arg("seed") = py::none(), py::arg("stream") = 0)
      .def("register_component", &PyDevice::register_component, py::arg("id"), py::arg("dimension"),
           py::arg("unit") = "",
           "Declare a component (e.g. 'location', 2, 'm'): rho refers to distances in `unit`.")
      .def("set_component", &PyDevice::set_component, py::arg("id"), py::arg("values"),
           "Set a component's current value (the user's data; never leaves the device).")
      .def("set_location_frame", &PyDevice::set_location_frame, py::arg("frame"),
           "Keep the coordinator's location frame, as cgp-coordinator --frame writes it "
           "('local:LON,LAT'), to project GPS positions on the device; positions already set "
           "from lon/lat are projected again in it. A 'mercator:LON' frame is refused (error "
           "naming 'frame.projection'): devices answer only in local frames.")
      .def_property_readonly("location_frame", &PyDevice::location_frame,
                             "The frame kept by set_location_frame (its text), or None.")
      .def("set_location_lonlat", &PyDevice::set_location_lonlat, py::arg("id"), py::arg("lon"),
           py::arg("lat"),
           "Set a 2-D component (unit m) to a GPS position in degrees, projected on the device in "
           "the kept frame: exactly within 1,500 km of its origin, clamped towards the origin "
           "beyond (never refused: what is released is Lipschitz in ground metres with constant "
           "<= 1.0094). Errors name 'frame' (no frame kept yet), 'lon' or 'lat'.")
      .def("location", &PyDevice::location, py::arg("query_id"), py::arg("round"), py::arg("rho"),
           py::arg("component") = "location",
           "Release the component itself plus Gaussian noise at rho. Returns status "
           "(answered, refused_budget, rejected_invalid), values, charged_rho, "
           "remaining_budget and error.")
      .def("distance_to_point", &PyDevice::distance_to_point, py::arg("point"), py::arg("query_id"),
           py::arg("round"), py::arg("rho"), py::arg("component") = "location",
           "Release ||x - point|| plus noise at rho.")
      .def("signed_distance_to_region", &PyDevice::signed_distance_to_region, py::arg("region"),
           py::arg("query_id"), py::arg("round"), py::arg("rho"), py::arg("component") = "location",
           "Release the signed distance to `region` (negative inside) plus noise at rho.")
      .def("handle", &PyDevice::handle, py::arg("request"),
           "The wire path: a serialized cgp.v1.DeviceRequest in, the serialized "
           "cgp.v1.DeviceReply out (what cgp-device exchanges with a coordinator).")
      .def_property_readonly("remaining", &PyDevice::remaining, "Budget left (filter units).")
      .def_property_readonly("spent", &PyDevice::spent, "Budget spent (filter units).")
      .def_property_readonly("filter", &PyDevice::filter, "'cgp' or 'approximate_gp'.")
      .def_property_readonly("secure_randomness", &PyDevice::secure_randomness)
      .def_property_readonly("ledger_error", &PyDevice::ledger_error,
                             "None, or the ledger failure that makes the device refuse "
                             "everything (fail closed).");
}

}  // namespace cgp::python

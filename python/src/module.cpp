// cgpkit's Python module: the C++ engine itself, not a re-implementation — simulated
// fleets and the queries of paper §6 (accuracy-first ones too), a device with its own filter,
// privacy arithmetic and the selection accountants, geometry, and the experiments cgp-sim runs
// (as pandas frames in cgpkit/experiments.py).
#include "binding.hpp"
#include "cgp/common/version.hpp"

namespace cgp::python {

void raise(const Error& e) {
  py::object type = py::module_::import("cgpkit._errors").attr("Error");
  py::object error = type(std::string(error_code_name(e.code)), e.parameter, e.message);
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

std::pair<std::span<const double>, std::size_t> rows_of(const Points& points) {
  if (points.ndim() == 1) return {{points.data(), static_cast<std::size_t>(points.shape(0))}, 1};
  if (points.ndim() != 2)
    raise(make_error(ErrorCode::invalid_argument, "points", "points must be an n x d array"));
  return {{points.data(), static_cast<std::size_t>(points.size())},
          static_cast<std::size_t>(points.shape(1))};
}

std::vector<double> vector_of(const Points& values) {
  return std::vector<double>(values.data(), values.data() + values.size());
}

}  // namespace cgp::python

PYBIND11_MODULE(_cgpkit, m) {
  using namespace cgp::python;
  m.doc() = "cgpkit: location analytics under local geo-privacy (the C++ engine)";
  m.attr("__version__") = std::string(cgp::version_string());
  bind_geometry(m);
  bind_privacy(m);
  bind_fleet(m);
  bind_device(m);
  bind_experiments(m);
}

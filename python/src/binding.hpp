// What every part of cgpkit's Python module shares: cgp::Error as cgpkit.Error, numpy arrays in,
// long calls without the GIL, and one opaque Region type.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <span>
#include <utility>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::python {

namespace py = pybind11;

// A cgp::Error as cgpkit.Error(code, parameter, message).
[[noreturn]] void raise(const Error& e);

template <class T>
T value_or_raise(Expected<T> result) {
  if (!result) raise(result.error());
  return std::move(*result);
}
inline void ok_or_raise(const Status& status) {
  if (!status) raise(status.error());
}

using Points = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A region held as one opaque Python object (pybind11's std::variant caster would otherwise
// unwrap it into three unregistered types).
struct Region {
  geometry::Region value;
};

// An n × d array (or a 1-D array of n values, d = 1): the values (not copied) and d.
std::pair<std::span<const double>, std::size_t> rows_of(const Points& points);
std::vector<double> vector_of(const Points& values);

// Runs `run` (returning Expected) with the GIL released; its error raised as cgpkit.Error.
template <class Run>
auto without_gil(Run&& run) {
  auto result = [&] {
    py::gil_scoped_release unlocked;
    return run();
  }();
  return value_or_raise(std::move(result));
}

void bind_geometry(py::module_& m);
void bind_privacy(py::module_& m);
void bind_fleet(py::module_& m);
void bind_device(py::module_& m);
void bind_experiments(py::module_& m);

}  // namespace cgp::python

// cgpkit's geometry: regions (boxes, balls, polygons with holes), the signed distance every
// range query releases, vectorized over points, and the lon/lat projection cgp-sim uses.
#include <array>
#include <optional>
#include <string>

#include "binding.hpp"
#include "cgp/common/geometry/projection.hpp"
#include "cgp/common/geometry/signed_distance.hpp"

namespace cgp::python {

void bind_geometry(py::module_& m) {
  py::class_<Region>(m, "Region", "A box, a ball or a polygon with holes.");
  m.def(
      "box",
      [](std::vector<double> lo, std::vector<double> hi) {
        return Region{value_or_raise(geometry::Box::create(lo, hi))};
      },
      py::arg("lo"), py::arg("hi"), "An axis-aligned box [lo, hi] in any dimension.");
  m.def(
      "ball",
      [](std::vector<double> centre, double radius) {
        return Region{value_or_raise(geometry::Ball::create(centre, radius))};
      },
      py::arg("centre"), py::arg("radius"), "A ball (a disc in 2-D).");
  m.def(
      "polygon",
      [](std::vector<geometry::Point2> outer, std::vector<std::vector<geometry::Point2>> holes) {
        return Region{value_or_raise(geometry::Polygon::create(outer, holes))};
      },
      py::arg("outer"), py::arg("holes") = std::vector<std::vector<geometry::Point2>>{},
      "A simple polygon with holes: lists of (x, y) vertices.");
  m.def(
      "signed_distance",
      [](const Region& region, const Points& points) {
        const auto [values, d] = rows_of(points);
        if (d != geometry::dimension(region.value))
          raise(make_error(ErrorCode::dimension_mismatch, "points",
                           "points have " + std::to_string(d) + " columns, the region " +
                               std::to_string(geometry::dimension(region.value)) + " dimensions"));
        const std::size_t n = values.size() / std::max<std::size_t>(d, 1);
        py::array_t<double> out(static_cast<py::ssize_t>(n));
        {
          py::gil_scoped_release unlocked;
          geometry::signed_distances(region.value, values.data(), n, out.mutable_data());
        }
        return out;
      },
      py::arg("region"), py::arg("points"),
      "Proj_Γ (eq. 11) of each row: negative inside, positive outside (1-Lipschitz).");

  // Projections: GPS lon/lat to the metres every query is in.
  m.def(
      "project",
      [](const Points& lonlat, const std::string& kind,
         std::optional<std::array<double, 2>> origin) {
        const auto [values, d] = rows_of(lonlat);
        if (d != 2)
          raise(make_error(ErrorCode::dimension_mismatch, "lonlat", "lonlat must be n x 2"));
        const std::size_t n = values.size() / 2;
        std::vector<double> lons(n), lats(n);
        for (std::size_t i = 0; i < n; ++i) lons[i] = values[2 * i], lats[i] = values[2 * i + 1];
        const auto centre = origin ? *origin : value_or_raise(geometry::lonlat_centre(lons, lats));
        const auto projection = value_or_raise(geometry::LonLatProjection::create(
            value_or_raise(geometry::parse_projection_kind(kind)), centre[0], centre[1]));
        py::array_t<double> out({static_cast<py::ssize_t>(n), py::ssize_t{2}});
        auto view = out.mutable_unchecked<2>();
        for (std::size_t i = 0; i < n; ++i) {
          const auto xy = value_or_raise(projection.forward(lons[i], lats[i]));
          view(static_cast<py::ssize_t>(i), 0) = xy[0];
          view(static_cast<py::ssize_t>(i), 1) = xy[1];
        }
        return py::make_tuple(out, centre);
      },
      py::arg("lonlat"), py::arg("kind") = "local", py::arg("origin") = std::nullopt,
      "(lon, lat) degrees to (x, y) metres as cgp-sim projects them (local = azimuthal "
      "equidistant around the data's centre, or `origin`): returns (xy, origin).");
}

}  // namespace cgp::python

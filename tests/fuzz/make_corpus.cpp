// Writes the seed corpus of fuzz_device: small serialized cgp.v1.DeviceRequests, each preceded
// by the 2-byte reply-capacity selector the harness reads (little-endian u16, capacity =
// selector % 8193). Usage: cgp_fuzz_make_corpus <dir>   (scripts/fuzz.sh --regen-corpus)
// Inputs that found bugs are added here once fixed, so that the corpus run keeps them fixed.
//
// Mostly valid requests for the harness's devices ("location" 2-D at (100, -50), "v" 8-D), for
// every statistic and region kind, at several ρ and rounds, plus replays (same id, same or other
// content), a few invalid ones and small or NULL reply buffers.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "cgp/common/wire/codec.hpp"

namespace {

using cgp::v1::DeviceRequest;

DeviceRequest base(const std::string& query, std::uint32_t round, const std::string& component,
                   double rho) {
  DeviceRequest r;
  r.mutable_id()->set_query_id(query);
  r.mutable_id()->set_round(round);
  r.set_component_id(component);
  r.set_rho(rho);
  return r;
}

DeviceRequest location(const std::string& query, std::uint32_t round, const std::string& component,
                       double rho) {
  DeviceRequest r = base(query, round, component, rho);
  r.mutable_location();
  return r;
}

DeviceRequest distance(const std::string& query, std::uint32_t round, const std::string& component,
                       std::initializer_list<double> point, double rho) {
  DeviceRequest r = base(query, round, component, rho);
  for (double v : point) r.mutable_distance_to_point()->add_point(v);
  return r;
}

DeviceRequest box(const std::string& query, std::uint32_t round, const std::string& component,
                  std::initializer_list<double> lo, std::initializer_list<double> hi, double rho) {
  DeviceRequest r = base(query, round, component, rho);
  auto* b = r.mutable_signed_distance_to_region()->mutable_region()->mutable_box();
  for (double v : lo) b->add_lo(v);
  for (double v : hi) b->add_hi(v);
  return r;
}

DeviceRequest ball(const std::string& query, std::uint32_t round, const std::string& component,
                   std::initializer_list<double> center, double radius, double rho) {
  DeviceRequest r = base(query, round, component, rho);
  auto* b = r.mutable_signed_distance_to_region()->mutable_region()->mutable_ball();
  for (double v : center) b->add_center(v);
  b->set_radius(radius);
  return r;
}

void ring(cgp::v1::Ring* out, std::initializer_list<double> xy) {
  for (double v : xy) out->add_xy(v);
}

DeviceRequest polygon(const std::string& query, std::uint32_t round, double rho,
                      std::initializer_list<double> outer,
                      std::initializer_list<std::initializer_list<double>> holes = {}) {
  DeviceRequest r = base(query, round, "location", rho);
  auto* p = r.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon();
  ring(p->mutable_outer(), outer);
  for (auto hole : holes) ring(p->add_holes(), hole);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  int written = 0;
  auto seed = [&](const char* name, std::uint16_t capacity, const DeviceRequest& request) {
    std::string bytes;
    bytes.push_back(static_cast<char>(capacity & 0xff));
    bytes.push_back(static_cast<char>(capacity >> 8));
    bytes += cgp::wire::serialize(request);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
      std::exit(1);
    }
    ++written;
  };

  // Location (point privatization), 2-D and 8-D, several ρ and rounds.
  seed("location_2d.bin", 4096, location("q-loc", 1, "location", 0.01));
  seed("location_2d_round2.bin", 4096, location("q-loc", 2, "location", 0.02));
  seed("location_2d_round_max.bin", 8192, location("q-loc", 4294967295u, "location", 1e-6));
  seed("location_8d.bin", 4096, location("q-vec", 1, "v", 0.001));
  seed("location_tiny_rho.bin", 4096, location("q-tiny", 7, "location", 1e-12));
  // Replays: the same request again (into a too-small buffer first), and the same id with
  // another ρ (request_conflict).
  seed("location_2d_replay_small_buffer.bin", 24, location("q-loc", 1, "location", 0.01));
  seed("location_2d_conflict.bin", 4096, location("q-loc", 1, "location", 0.5));
  // Selector 8193 = 0x2001: capacity 0 with an odd first byte, a NULL reply buffer; selector 0
  // is a zero-length (non-NULL) buffer.
  seed("location_null_buffer.bin", 8193, location("q-null", 1, "location", 0.01));
  seed("location_zero_buffer.bin", 0, location("q-zero", 1, "v", 0.01));

  // Distance to a point.
  seed("distance_2d.bin", 4096, distance("q-dist", 1, "location", {0, 0}, 0.05));
  seed("distance_8d.bin", 4096, distance("q-dist8", 3, "v", {0, 0, 0, 0, 1, 1, 1, 1}, 0.1));
  seed("distance_far.bin", 4096, distance("q-far", 1, "location", {1e5, -1e5}, 1e-4));

  // Signed distance to a region.
  seed("box_2d.bin", 4096, box("q-box", 1, "location", {0, -100}, {200, 0}, 0.02));
  seed("box_8d.bin", 4096,
       box("q-box8", 1, "v", {0, -5, -1, 0, -10, 0, 0, 0}, {2, 0, 1, 2000, 0, 5, 1, 50}, 0.03));
  seed("ball_2d.bin", 4096, ball("q-ball", 1, "location", {90, -40}, 25, 0.02));
  seed("ball_8d.bin", 4096, ball("q-ball8", 2, "v", {0, 0, 0, 1000, 0, 0, 0, 40}, 10, 0.01));
  seed("polygon_square.bin", 4096, polygon("q-poly", 1, 0.02, {0, -100, 200, -100, 200, 0, 0, 0}));
  seed("polygon_concave_closed.bin", 4096,
       polygon("q-poly-l", 1, 0.005, {0, 0, 300, 0, 300, 100, 100, 100, 100, 300, 0, 300, 0, 0}));
  seed("polygon_hole.bin", 4096,
       polygon("q-poly-hole", 1, 0.02, {-500, -500, 500, -500, 500, 500, -500, 500},
               {{50, -100, 150, -100, 150, 0, 50, 0}}));
  seed("polygon_two_holes.bin", 4096,
       polygon("q-poly-holes", 5, 0.01, {-500, -500, 500, -500, 500, 500, -500, 500},
               {{-400, -400, -300, -400, -300, -300}, {200, 200, 300, 200, 300, 300, 200, 300}}));

  // Invalid or refused: ρ ≤ 0, ρ over the budget, unknown or unset component, an id of the
  // maximal length (128 bytes, multi-byte UTF-8), a missing id, a dimension mismatch.
  seed("invalid_rho_zero.bin", 4096, location("q-bad", 1, "location", 0));
  seed("refused_over_budget.bin", 4096, location("q-big", 1, "location", 2.0));
  seed("unknown_component.bin", 4096, location("q-unk", 1, "nowhere", 0.01));
  seed("unset_component.bin", 4096, location("q-unset", 1, "unset", 0.01));
  std::string long_id;
  while (long_id.size() + 3 <= 128) long_id += "\xe2\x82\xac";  // "€"
  long_id += "ab";
  seed("long_utf8_id.bin", 8192, distance(long_id, 9, "location", {1, 2}, 0.001));
  DeviceRequest no_id = location("", 0, "location", 0.01);
  no_id.clear_id();
  seed("missing_id.bin", 4096, no_id);
  seed("dimension_mismatch.bin", 4096, distance("q-dim", 1, "v", {1, 2, 3}, 0.01));

  // Found by fuzzing (fixed in 8fdc6ff): a polygon coordinate far beyond kMaxCoordinate (2^30)
  // made Boost.Geometry's integer rescaling throw boost::numeric::positive_overflow out of
  // Device::handle; and coordinates within ±2^30 overflowed the 64-bit determinant of that
  // rescaling in bg::is_valid (UBSan: boost/geometry/arithmetic/determinant.hpp:44).
  seed("polygon_coordinate_out_of_range.bin", 4096,
       polygon("q-poly-far", 1, 0.02, {0, -100, 3.6446967223631734e88, -101.3, 200, 0, 0, 0}));
  seed("polygon_rescale_overflow.bin", 4096,
       polygon("q-poly-ub", 1, 0.02, {0, 0, 1000, 0, 1000, 1000, 0, 1000},
               {{100, -400000000, 1, 2, 1, 1}}));
  std::printf("wrote %d seeds to %s\n", written, dir.c_str());

  return 0;
}

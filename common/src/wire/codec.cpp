#include "cgp/common/wire/codec.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp::wire {
namespace {

template <class Message>
Expected<Message> parse_bounded(std::span<const std::uint8_t> bytes, std::string_view what) {
  if (bytes.size() > kMaxMessageBytes) {
    return make_error(ErrorCode::too_large, what,
                      std::string(what) + " has " + std::to_string(bytes.size()) +
                          " bytes, over the limit of " + std::to_string(kMaxMessageBytes));
  }
  Message message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(ErrorCode::malformed_message, what,
                      std::string(what) + " is not a valid serialized cgp.v1 message");
  }
  return message;
}

std::vector<double> copy(const google::protobuf::RepeatedField<double>& field) {
  return std::vector<double>(field.begin(), field.end());
}

Status require_wire_dimension(std::string_view parameter, int size) {
  if (static_cast<std::size_t>(size) > kMaxDimension) {
    return make_error(ErrorCode::too_large, parameter,
                      std::string(parameter) + " has dimension " + std::to_string(size) +
                          ", over the limit of " + std::to_string(kMaxDimension));
  }
  return {};
}

Expected<geometry::Ring> ring_from_wire(const v1::Ring& ring, std::string_view parameter) {
  if (ring.xy_size() % 2 != 0) {
    return make_error(ErrorCode::dimension_mismatch, parameter,
                      std::string(parameter) + ".xy must hold x, y pairs, got " +
                          std::to_string(ring.xy_size()) + " numbers");
  }
  geometry::Ring out(static_cast<std::size_t>(ring.xy_size() / 2));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = {ring.xy(static_cast<int>(2 * i)), ring.xy(static_cast<int>(2 * i + 1))};
  return out;
}

void ring_to_wire(const geometry::Ring& ring, v1::Ring* out) {
  for (const auto& p : ring) {
    out->add_xy(p[0]);
    out->add_xy(p[1]);
  }
}

}  // namespace

Expected<v1::DeviceRequest> parse_device_request(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::DeviceRequest>(bytes, "DeviceRequest");
}
Expected<v1::DeviceReply> parse_device_reply(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::DeviceReply>(bytes, "DeviceReply");
}
Expected<v1::DeviceConfig> parse_device_config(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::DeviceConfig>(bytes, "DeviceConfig");
}
Expected<v1::WatchSpec> parse_watch_spec(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::WatchSpec>(bytes, "WatchSpec");
}
Expected<v1::DeviceToCoordinator> parse_device_to_coordinator(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::DeviceToCoordinator>(bytes, "DeviceToCoordinator");
}
Expected<v1::CoordinatorToDevice> parse_coordinator_to_device(std::span<const std::uint8_t> bytes) {
  return parse_bounded<v1::CoordinatorToDevice>(bytes, "CoordinatorToDevice");
}

std::string serialize(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

Expected<geometry::Region> region_from_wire(const v1::Region& region) {
  switch (region.shape_case()) {
    case v1::Region::kBox: {
      const auto& box = region.box();
      CGP_RETURN_IF_ERROR(require_wire_dimension("box.lo", box.lo_size()));
      CGP_ASSIGN_OR_RETURN(auto made, geometry::Box::create(copy(box.lo()), copy(box.hi())));
      return geometry::Region(std::move(made));
    }
    case v1::Region::kBall: {
      const auto& ball = region.ball();
      CGP_RETURN_IF_ERROR(require_wire_dimension("ball.center", ball.center_size()));
      CGP_ASSIGN_OR_RETURN(auto made, geometry::Ball::create(copy(ball.center()), ball.radius()));
      return geometry::Region(std::move(made));
    }
    case v1::Region::kPolygon: {
      const auto& polygon = region.polygon();
      if (static_cast<std::size_t>(polygon.holes_size()) > kMaxPolygonHoles) {
        return make_error(ErrorCode::too_large, "polygon.holes",
                          "polygon.holes has " + std::to_string(polygon.holes_size()) +
                              " rings, over the limit of " + std::to_string(kMaxPolygonHoles));
      }
      std::size_t numbers = static_cast<std::size_t>(polygon.outer().xy_size());
      for (const auto& hole : polygon.holes()) numbers += static_cast<std::size_t>(hole.xy_size());
      if (numbers / 2 > kMaxPolygonVertices) {
        return make_error(ErrorCode::too_large, "polygon",
                          "polygon has " + std::to_string(numbers / 2) +
                              " vertices, over the limit of " +
                              std::to_string(kMaxPolygonVertices));
      }
      if (!polygon.has_outer())
        return make_error(ErrorCode::missing_field, "polygon.outer", "polygon.outer is missing");
      CGP_ASSIGN_OR_RETURN(auto outer, ring_from_wire(polygon.outer(), "polygon.outer"));
      std::vector<geometry::Ring> holes;
      holes.reserve(static_cast<std::size_t>(polygon.holes_size()));
      for (int h = 0; h < polygon.holes_size(); ++h) {
        auto hole = ring_from_wire(polygon.holes(h),
                                   indexed_name("polygon.holes", static_cast<std::size_t>(h)));
        if (!hole) return hole.error();
        holes.push_back(std::move(*hole));
      }
      CGP_ASSIGN_OR_RETURN(auto made,
                           geometry::Polygon::create(std::move(outer), std::move(holes)));
      return geometry::Region(std::move(made));
    }
    case v1::Region::SHAPE_NOT_SET:
      break;
  }
  return make_error(ErrorCode::missing_field, "region",
                    "region must be one of box, ball, polygon; none was set");
}

v1::Region region_to_wire(const geometry::Region& region) {
  v1::Region out;
  if (const auto* box = std::get_if<geometry::Box>(&region)) {
    auto* b = out.mutable_box();
    for (double v : box->lo()) b->add_lo(v);
    for (double v : box->hi()) b->add_hi(v);
  } else if (const auto* ball = std::get_if<geometry::Ball>(&region)) {
    auto* b = out.mutable_ball();
    for (double v : ball->center()) b->add_center(v);
    b->set_radius(ball->radius());
  } else {
    const auto& polygon = std::get<geometry::Polygon>(region);
    auto* p = out.mutable_polygon();
    ring_to_wire(polygon.outer(), p->mutable_outer());
    for (const auto& hole : polygon.holes()) ring_to_wire(hole, p->add_holes());
  }
  return out;
}

Expected<std::optional<geometry::LocationFrame>> frame_from_wire(const v1::LocationFrame& frame) {
  geometry::ProjectionKind projection;
  switch (frame.projection()) {
    case v1::PROJECTION_UNSPECIFIED:
      return std::optional<geometry::LocationFrame>();
    case v1::PROJECTION_LOCAL_EQUIDISTANT:
      projection = geometry::ProjectionKind::local_equidistant;
      break;
    case v1::PROJECTION_SPHERICAL_MERCATOR:
      projection = geometry::ProjectionKind::spherical_mercator;
      break;
    default:
      return make_error(ErrorCode::invalid_argument, "frame.projection",
                        "frame.projection " + std::to_string(frame.projection()) + " is unknown");
  }
  CGP_ASSIGN_OR_RETURN(auto valid, geometry::LocationFrame::create(projection, frame.origin_lon(),
                                                                   frame.origin_lat()));
  return std::optional<geometry::LocationFrame>(std::move(valid));
}

v1::LocationFrame frame_to_wire(const std::optional<geometry::LocationFrame>& frame) {
  v1::LocationFrame out;
  if (!frame) return out;
  out.set_projection(frame->projection() == geometry::ProjectionKind::local_equidistant
                         ? v1::PROJECTION_LOCAL_EQUIDISTANT
                         : v1::PROJECTION_SPHERICAL_MERCATOR);
  out.set_origin_lon(frame->origin_lon());
  out.set_origin_lat(frame->origin_lat());
  return out;
}

namespace {
Expected<DeviceRequest> statistic_from_wire(const v1::DeviceRequest& request) {
  if (!request.has_id())
    return make_error(ErrorCode::missing_field, "id", "id (query_id and round) is missing");
  RequestId id{request.id().query_id(), request.id().round()};
  switch (request.statistic_case()) {
    case v1::DeviceRequest::kLocation:
      return DeviceRequest::location(std::move(id), request.component_id(), request.rho());
    case v1::DeviceRequest::kDistanceToPoint: {
      const auto& point = request.distance_to_point().point();
      CGP_RETURN_IF_ERROR(require_wire_dimension("point", point.size()));
      return DeviceRequest::distance_to_point(std::move(id), request.component_id(), copy(point),
                                              request.rho());
    }
    case v1::DeviceRequest::kSignedDistanceToRegion: {
      if (!request.signed_distance_to_region().has_region())
        return make_error(ErrorCode::missing_field, "region", "region is missing");
      CGP_ASSIGN_OR_RETURN(auto region,
                           region_from_wire(request.signed_distance_to_region().region()));
      return DeviceRequest::signed_distance_to_region(std::move(id), request.component_id(),
                                                      std::move(region), request.rho());
    }
    case v1::DeviceRequest::STATISTIC_NOT_SET:
      break;
  }
  return make_error(ErrorCode::missing_field, "statistic",
                    "statistic must be one of location, distance_to_point, "
                    "signed_distance_to_region; none was set");
}
}  // namespace

Expected<DeviceRequest> request_from_wire(const v1::DeviceRequest& request) {
  CGP_ASSIGN_OR_RETURN(auto out, statistic_from_wire(request));
  CGP_ASSIGN_OR_RETURN(auto frame, frame_from_wire(request.frame()));
  out.set_frame(std::move(frame));
  return out;
}

v1::DeviceRequest request_to_wire(const DeviceRequest& request) {
  v1::DeviceRequest out;
  out.mutable_id()->set_query_id(request.id().query_id);
  out.mutable_id()->set_round(request.id().round);
  out.set_component_id(request.component_id());
  out.set_rho(request.rho());
  if (request.frame()) *out.mutable_frame() = frame_to_wire(request.frame());
  switch (request.statistic()) {
    case StatisticKind::location:
      out.mutable_location();
      break;
    case StatisticKind::distance_to_point:
      for (double v : request.point()) out.mutable_distance_to_point()->add_point(v);
      break;
    case StatisticKind::signed_distance_to_region:
      *out.mutable_signed_distance_to_region()->mutable_region() =
          region_to_wire(*request.region());
      break;
  }
  return out;
}

Expected<DeviceConfig> config_from_wire(const v1::DeviceConfig& config) {
  auto filter = [&]() -> Expected<DeviceConfig> {
    switch (config.filter()) {
      case v1::CGP:
        return DeviceConfig::cgp(config.budget(), config.sticky_halt());
      case v1::APPROXIMATE_GP:
        return DeviceConfig::approximate_gp(config.budget(), config.delta(), config.lambda(),
                                            config.sticky_halt());
      default:
        break;
    }
    return make_error(ErrorCode::invalid_argument, "filter",
                      "filter must be CGP or APPROXIMATE_GP, got " +
                          std::to_string(static_cast<int>(config.filter())));
  }();
  if (!filter) return filter;
  return filter->with_expost_epsilon(config.expost_epsilon());
}

Expected<WatchSpec> watch_from_wire(const v1::WatchSpec& spec) {
  WatchSpecParams p;
  p.watch_id = spec.watch_id();
  p.component_id = spec.component_id();
  switch (spec.score_case()) {
    case v1::WatchSpec::kDistanceToPoint:
      CGP_RETURN_IF_ERROR(require_wire_dimension("point", spec.distance_to_point().point_size()));
      p.statistic = StatisticKind::distance_to_point;
      p.point = copy(spec.distance_to_point().point());
      break;
    case v1::WatchSpec::kSignedDistanceToRegion: {
      if (!spec.signed_distance_to_region().has_region())
        return make_error(ErrorCode::missing_field, "region", "region is missing");
      CGP_ASSIGN_OR_RETURN(auto region,
                           region_from_wire(spec.signed_distance_to_region().region()));
      p.statistic = StatisticKind::signed_distance_to_region;
      p.region = std::move(region);
      break;
    }
    case v1::WatchSpec::SCORE_NOT_SET:
      return make_error(ErrorCode::missing_field, "score",
                        "score must be distance_to_point or signed_distance_to_region; none was "
                        "set");
  }
  p.threshold = spec.threshold();
  p.clamp_lo = spec.clamp_lo();
  p.clamp_hi = spec.clamp_hi();
  switch (spec.trigger()) {
    case v1::WATCH_TRIGGER_AT_OR_BELOW:
      p.trigger = WatchTrigger::at_or_below;
      break;
    case v1::WATCH_TRIGGER_AT_OR_ABOVE:
      p.trigger = WatchTrigger::at_or_above;
      break;
    default:
      return make_error(ErrorCode::invalid_argument, "trigger",
                        "trigger must be AT_OR_BELOW or AT_OR_ABOVE, got " +
                            std::to_string(static_cast<int>(spec.trigger())));
  }
  switch (spec.noise()) {
    case v1::WATCH_NOISE_LAPLACE:
      p.noise = WatchNoise::laplace;
      break;
    case v1::WATCH_NOISE_GAUSSIAN_EXPOST:
      p.noise = WatchNoise::gaussian_expost;
      break;
    default:
      return make_error(ErrorCode::invalid_argument, "noise",
                        "noise must be LAPLACE or GAUSSIAN_EXPOST, got " +
                            std::to_string(static_cast<int>(spec.noise())));
  }
  p.horizon = spec.horizon();
  p.epsilon = spec.epsilon();
  p.sigma = spec.sigma();
  p.tick_seconds = spec.tick_seconds();
  p.start_unix_seconds = spec.start_unix_seconds();
  return WatchSpec::create(std::move(p));
}

v1::WatchSpec watch_to_wire(const WatchSpec& spec) {
  const WatchSpecParams& p = spec.params();
  v1::WatchSpec out;
  out.set_watch_id(p.watch_id);
  out.set_component_id(p.component_id);
  if (p.statistic == StatisticKind::distance_to_point) {
    for (double v : p.point) out.mutable_distance_to_point()->add_point(v);
  } else {
    *out.mutable_signed_distance_to_region()->mutable_region() = region_to_wire(*p.region);
  }
  out.set_threshold(p.threshold);
  out.set_clamp_lo(p.clamp_lo);
  out.set_clamp_hi(p.clamp_hi);
  out.set_trigger(p.trigger == WatchTrigger::at_or_below ? v1::WATCH_TRIGGER_AT_OR_BELOW
                                                         : v1::WATCH_TRIGGER_AT_OR_ABOVE);
  out.set_horizon(p.horizon);
  out.set_noise(p.noise == WatchNoise::laplace ? v1::WATCH_NOISE_LAPLACE
                                               : v1::WATCH_NOISE_GAUSSIAN_EXPOST);
  out.set_epsilon(p.epsilon);
  out.set_sigma(p.sigma);
  out.set_tick_seconds(p.tick_seconds);
  out.set_start_unix_seconds(p.start_unix_seconds);
  return out;
}

v1::DeviceConfig config_to_wire(const DeviceConfig& config) {
  v1::DeviceConfig out;
  out.set_filter(config.filter() == FilterKind::cgp ? v1::CGP : v1::APPROXIMATE_GP);
  out.set_budget(config.budget());
  if (config.filter() == FilterKind::approximate_gp) {
    out.set_delta(config.delta());
    out.set_lambda(config.lambda());
  }
  out.set_sticky_halt(config.sticky_halt());
  out.set_expost_epsilon(config.expost_epsilon());
  return out;
}

v1::ErrorCode error_code_to_wire(ErrorCode code) noexcept {
  auto value = static_cast<int>(code);
  return v1::ErrorCode_IsValid(value) ? static_cast<v1::ErrorCode>(value) : v1::INVALID_ARGUMENT;
}

ErrorCode error_code_from_wire(v1::ErrorCode code) noexcept {
  auto value = static_cast<int>(code);
  if (value < 0 || value > static_cast<int>(kLastErrorCode)) return ErrorCode::invalid_argument;
  return static_cast<ErrorCode>(value);
}

// At most `limit` bytes, not splitting a UTF-8 sequence (proto3 strings must stay valid UTF-8).
std::string cut_utf8(const std::string& text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

v1::DeviceReply reply_to_wire(const DeviceReply& reply) {
  v1::DeviceReply out;
  out.mutable_id()->set_query_id(reply.id.query_id);
  out.mutable_id()->set_round(reply.id.round);
  switch (reply.status) {
    case ReplyStatus::answered:
      out.set_status(v1::ANSWERED);
      break;
    case ReplyStatus::refused_budget:
      out.set_status(v1::REFUSED_BUDGET);
      break;
    case ReplyStatus::rejected_invalid:
      out.set_status(v1::REJECTED_INVALID);
      out.set_error(error_code_to_wire(reply.error.code));
      out.set_error_message(cut_utf8(reply.error.message, kMaxReplyErrorMessage));
      break;
  }
  for (double v : reply.values) out.add_values(v);
  out.set_charged_rho(reply.charged_rho);
  out.set_remaining_budget(reply.remaining_budget);
  return out;
}

DeviceReply reply_from_wire(const v1::DeviceReply& in) {
  DeviceReply reply;
  reply.id = {in.id().query_id(), in.id().round()};
  switch (in.status()) {
    case v1::ANSWERED:
      reply.status = ReplyStatus::answered;
      break;
    case v1::REFUSED_BUDGET:
      reply.status = ReplyStatus::refused_budget;
      break;
    default:
      reply.status = ReplyStatus::rejected_invalid;
      break;
  }
  reply.error = Error{error_code_from_wire(in.error()), "", in.error_message()};
  reply.values.assign(in.values().begin(), in.values().end());
  reply.charged_rho = in.charged_rho();
  reply.remaining_budget = in.remaining_budget();
  return reply;
}

}  // namespace cgp::wire

// Device::start_watch and Device::tick_watch: the watch path of a device (watch.md).
#include <cstring>

#include "cgp/client/device.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "device_state.hpp"
#include "watch_mechanism.hpp"

namespace cgp::client {
namespace {

// The ledger stores the threshold noise as the two halves of its two's-complement bits.
std::pair<std::int64_t, std::uint64_t> split(int128 value) {
  const uint128 bits = twos_complement_bits(value);
  return {static_cast<std::int64_t>(high64(bits)), low64(bits)};
}

int128 join(std::int64_t high, std::uint64_t low) {
  return from_twos_complement_bits(make_uint128(static_cast<std::uint64_t>(high), low));
}

Error tick_error(std::uint64_t tick, const std::string& why) {
  return make_error(ErrorCode::out_of_range, "tick",
                    "tick " + std::to_string(tick) + " cannot be evaluated: " + why);
}

Error internal_failure() {
  return make_error(ErrorCode::internal_error, "watch",
                    "the device could not process this watch call; nothing was charged");
}

// The component the watch's score reads, checked against the score's dimension.
Expected<const Component*> watch_component(
    const std::unordered_map<std::string, Component>& components, const WatchSpec& spec,
    bool needs_value) {
  auto it = components.find(spec.component_id());
  if (it == components.end())
    return make_error(
        ErrorCode::unknown_component, "component_id",
        "component_id '" + spec.component_id() + "' is not registered on this device");
  if (it->second.dimension != spec.required_dimension())
    return make_error(ErrorCode::dimension_mismatch, "component_id",
                      "component_id '" + spec.component_id() + "' has dimension " +
                          std::to_string(it->second.dimension) + ", the watch's score needs " +
                          std::to_string(spec.required_dimension()));
  if (needs_value && it->second.value.empty())
    return make_error(ErrorCode::component_not_set, "component_id",
                      "component_id '" + spec.component_id() + "' has no value yet");
  return &it->second;
}

// The ledger's record of an armed watch; unknown_watch if this device never armed it.
Expected<WatchRecord> armed_watch(Ledger& ledger, const std::string& id) {
  CGP_ASSIGN_OR_RETURN(auto recorded, ledger.find_watch(id));
  if (!recorded)
    return make_error(ErrorCode::unknown_watch, "watch_id",
                      "watch_id '" + id + "' is not armed on this device");
  return std::move(*recorded);
}

// The spec a watch was armed with, as the ledger keeps it.
Expected<WatchSpec> recorded_spec(const std::string& id, const WatchRecord& watch) {
  auto wire_spec = wire::parse_watch_spec(
      std::span(reinterpret_cast<const std::uint8_t*>(watch.spec.data()), watch.spec.size()));
  if (wire_spec) {
    if (auto spec = wire::watch_from_wire(*wire_spec)) return spec;
  }
  return make_error(ErrorCode::ledger_failure, "ledger",
                    "ledger: the recorded spec of watch '" + id + "' is invalid");
}

// Only Laplace watches run on devices so far; the Gaussian ex-post option is refused by name.
Status require_supported(const WatchSpec& spec) {
  if (spec.noise() == WatchNoise::laplace) return {};
  return make_error(ErrorCode::invalid_argument, "noise",
                    "noise gaussian_expost is not available on this device version; use laplace");
}

}  // namespace

Expected<WatchArming> Device::start_watch(const WatchSpec& spec) noexcept {
  try {
    State& s = *state_;
    if (!s.ledger_status.ok()) return s.ledger_status.error();
    CGP_RETURN_IF_ERROR(require_supported(spec));
    CGP_ASSIGN_OR_RETURN(auto plan, plan_laplace_watch(spec, s.config.rho_capacity()));
    std::string canonical = wire::serialize(wire::watch_to_wire(spec));
    const RequestDigest digest = digest_of(canonical);

    WatchArming arming;
    arming.resolution = watch_resolution(spec, plan.grid_exponent);
    CGP_ASSIGN_OR_RETURN(auto recorded, s.ledger->find_watch(spec.watch_id()));
    if (recorded) {
      if (recorded->digest != digest)
        return make_error(
            ErrorCode::request_conflict, "watch_id",
            "watch_id '" + spec.watch_id() + "' was armed before with a different spec");
      arming.replayed = true;
      arming.charged_rho = recorded->charge;
      arming.remaining_budget = s.filter.remaining();
      return arming;
    }
    CGP_RETURN_IF_ERROR(watch_component(s.components, spec, false));

    // The filter decides on the public charge alone (Thm 4.3), as for a release.
    const double charge = plan.charged_rho;
    if (!admit_or_halt(s.filter, charge, [&] {
          if (auto st = s.ledger->record_halt(); !st) s.ledger_status = st;
        })) {
      arming.status = WatchStartStatus::refused_budget;
      arming.remaining_budget = s.filter.remaining();
      return arming;
    }
    // Drawn once, and recorded with the charge before the watch counts as armed: a crash before
    // the commit loses both, one after it keeps both (never a second threshold). The draw runs
    // in a paced window like a tick's: its time grows with |ν|, the watch's one secret, and the
    // answer goes straight back to the coordinator.
    const auto paced_until = s.pace_from_now(s.pacing.window(watch_statistic(spec), 1));
    RandomBits bits(*s.random);
    const auto [high, low] = split(draw_threshold_noise(plan, bits));
    s.pace_until(paced_until);
    WatchRecord record;
    record.spec = std::move(canonical);
    record.digest = digest;
    record.charge = charge;
    record.threshold_noise_high = high;
    record.threshold_noise_low = low;
    if (auto st = s.ledger->record_watch(spec.watch_id(), record, s.filter.spent(),
                                         s.filter.spent_after(charge));
        !st) {
      if (s.ledger_status.ok()) s.ledger_status = st;
      return st.error();
    }
    s.filter.commit(charge);
    arming.charged_rho = charge;
    arming.remaining_budget = s.filter.remaining();
    return arming;
  } catch (...) {
    return internal_failure();
  }
}

Expected<WatchTickStatus> Device::tick_watch(std::string_view watch_id,
                                             std::uint64_t tick) noexcept {
  try {
    State& s = *state_;
    if (!s.ledger_status.ok()) return s.ledger_status.error();
    const std::string id(watch_id);
    CGP_ASSIGN_OR_RETURN(const WatchRecord watch, armed_watch(*s.ledger, id));
    auto spec = recorded_spec(id, watch);
    if (!spec) return spec.error();

    if (tick == 0 || tick > spec->horizon())
      return tick_error(tick, "ticks are 1 to the horizon " + std::to_string(spec->horizon()));
    // Decisions already recorded are returned as they were: a repeated tick, also after a
    // restart, never draws new noise.
    if (watch.alert_tick != 0) {
      if (tick == watch.alert_tick) return WatchTickStatus::alert;
      if (tick > watch.alert_tick) return WatchTickStatus::finished;
      return tick_error(tick, "the watch alerted at tick " + std::to_string(watch.alert_tick));
    }
    if (watch.budget_exhausted && tick >= watch.last_tick) return WatchTickStatus::budget_exhausted;
    if (tick == watch.last_tick) return WatchTickStatus::silent;
    if (tick < watch.last_tick)
      return tick_error(tick, "ticks must increase; the last evaluated tick is " +
                                  std::to_string(watch.last_tick));

    CGP_ASSIGN_OR_RETURN(const Component* component, watch_component(s.components, *spec, true));
    CGP_ASSIGN_OR_RETURN(auto plan, plan_laplace_watch(*spec, s.config.rho_capacity()));

    // Evaluated in a paced window (privatizer.md, "Timing"): the time to decide says nothing
    // about the location or the noise.
    const StatisticSpec statistic = watch_statistic(*spec);
    const auto paced_until = s.pace_from_now(s.pacing.window(statistic, 1));
    RandomBits bits(*s.random);
    const std::int64_t score =
        watch_score_grid(*spec, plan.grid_exponent, component->value, s.watch_scratch);
    const bool fires = laplace_watch_fires(
        plan, score, join(watch.threshold_noise_high, watch.threshold_noise_low), bits);
    s.pace_until(paced_until);
    // Durable before the decision leaves this function.
    WatchTickRecord decision;
    decision.tick = tick;
    decision.alert = fires;
    if (auto st = s.ledger->record_watch_tick(id, decision, s.expost_spent, s.expost_spent); !st) {
      if (s.ledger_status.ok()) s.ledger_status = st;
      return st.error();
    }
    return fires ? WatchTickStatus::alert : WatchTickStatus::silent;
  } catch (...) {
    return internal_failure();
  }
}

std::string Device::start_watch(std::span<const std::uint8_t> spec_bytes) noexcept {
  try {
    v1::WatchStarted reply;
    auto fill_error = [&](const Error& error) {
      reply.set_status(v1::WATCH_REJECTED_INVALID);
      reply.set_error(wire::error_code_to_wire(error.code));
      reply.set_error_message(wire::cut_utf8(error.message, wire::kMaxReplyErrorMessage));
      reply.set_remaining_budget(remaining());
    };
    auto parsed = wire::parse_watch_spec(spec_bytes);
    if (!parsed) {
      fill_error(parsed.error());
    } else {
      reply.set_watch_id(wire::cut_utf8(parsed->watch_id(), wire::kMaxIdBytes));
      auto spec = wire::watch_from_wire(*parsed);
      auto arming = spec ? start_watch(*spec) : Expected<WatchArming>(spec.error());
      if (!arming) {
        fill_error(arming.error());
      } else {
        reply.set_status(arming->status == WatchStartStatus::armed ? v1::WATCH_ARMED
                                                                   : v1::WATCH_REFUSED_BUDGET);
        reply.set_charged_rho(arming->charged_rho);
        reply.set_remaining_budget(arming->remaining_budget);
      }
    }
    return wire::serialize(reply);
  } catch (...) {
    return {};
  }
}

Expected<Device::WatchState> Device::watch_state(std::string_view watch_id) const noexcept {
  try {
    const State& s = *state_;
    if (!s.ledger_status.ok()) return s.ledger_status.error();
    const std::string id(watch_id);
    CGP_ASSIGN_OR_RETURN(const WatchRecord recorded, armed_watch(*s.ledger, id));
    CGP_ASSIGN_OR_RETURN(auto spec, recorded_spec(id, recorded));
    return WatchState{std::move(spec), recorded.last_tick, recorded.alert_tick,
                      recorded.budget_exhausted};
  } catch (...) {
    return internal_failure();
  }
}

double Device::expost_spent() const noexcept {
  return state_->expost_spent;
}

}  // namespace cgp::client

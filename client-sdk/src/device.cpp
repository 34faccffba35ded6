#include "cgp/client/device.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"
#include "device_state.hpp"

namespace cgp::client {

// The longest reply with this id and output dimension: every field that can appear, doubles at
// full width (proto3 omits zeros, so real replies are never longer), and with `with_error` the
// longest error an invalid request can get.
std::size_t reply_size_bound(const RequestId& id, std::size_t output_dimension, bool with_error) {
  Reply largest;
  largest.id = id;
  largest.status = with_error ? ReplyStatus::rejected_invalid : ReplyStatus::answered;
  if (with_error)
    largest.error = Error{kLastErrorCode, "", std::string(wire::kMaxReplyErrorMessage, 'x')};
  largest.values.assign(output_dimension, 1.0);
  largest.charged_rho = 1.0;
  largest.remaining_budget = 1.0;
  return wire::serialize(wire::reply_to_wire(largest)).size();
}

Reply Device::State::process(const DeviceRequest& request, const RequestDigest& digest,
                             std::string& bytes, std::size_t capacity, std::size_t& needed) {
  const RequestId& id = request.id();
  needed = 0;
  auto finish = [&](Reply reply) {
    bytes = wire::serialize(wire::reply_to_wire(reply));
    if (bytes.size() > capacity) {
      needed = bytes.size();
      bytes.clear();
    }
    return reply;
  };
  if (!ledger_status.ok()) return finish(rejected(id, ledger_status.error()));

  // Idempotency: a recorded answer is returned as it left, with no new charge or noise.
  auto recorded = ledger->find(id);
  if (!recorded) return finish(rejected(id, recorded.error()));
  if (recorded->has_value()) {
    const AnsweredRequest& answer = **recorded;
    const std::string id_text = "id (" + id.query_id + ", " + std::to_string(id.round) + ")";
    if (answer.digest != digest) {
      return finish(rejected(id, make_error(ErrorCode::request_conflict, "id",
                                            id_text + " was already answered for a different "
                                                      "request")));
    }
    if (answer.pruned()) {
      return finish(rejected(
          id, make_error(ErrorCode::reply_pruned, "id",
                         id_text + " was answered and charged before, and its reply is past the "
                                   "retention window: it is not answered again")));
    }
    if (answer.reply.size() > capacity) {  // the stored bytes, whatever is registered now
      needed = answer.reply.size();
      return {};
    }
    bytes = answer.reply;
    v1::DeviceReply parsed;
    parsed.ParseFromString(bytes);
    return wire::reply_from_wire(parsed);
  }

  auto component = components.find(request.component_id());
  if (component == components.end()) {
    return finish(rejected(id, make_error(ErrorCode::unknown_component, "component_id",
                                          "component_id '" + request.component_id() +
                                              "' is not registered on this device")));
  }
  if (component->second.value.empty()) {
    return finish(
        rejected(id, make_error(ErrorCode::component_not_set, "component_id",
                                "component_id '" + request.component_id() + "' has no value yet")));
  }

  // A location projected from lon/lat in one frame cannot be read in another's metres.
  const auto& projected_in = component->second.frame;
  if (request.frame() && projected_in && *request.frame() != *projected_in) {
    return finish(rejected(
        id, make_error(ErrorCode::invalid_argument, "frame",
                       "the request is in frame " + request.frame()->to_string() +
                           ", but component_id '" + request.component_id() +
                           "' was projected from lon/lat in another frame: set its lon/lat "
                           "again after the coordinator's Welcome")));
  }

  // An invalid request never reaches the filter (it must not trip a sticky HALT).
  const StatisticSpec spec = StatisticSpec::of(request);
  if (auto s = check_statistic_input(spec, component->second.value); !s)
    return finish(rejected(id, s.error()));
  // Every public reason to reject (ρ range, coordinates against the grid's box) is decided here.
  auto plan = plan_release(spec, request.rho(), config.rho_capacity());
  if (!plan) return finish(rejected(id, plan.error()));
  const std::size_t output_dimension = spec.output_dimension(component->second.value.size());
  if (capacity != kUnbounded) {  // decided before the filter: nothing charged if it cannot fit
    if (const std::size_t bound = reply_size_bound(id, output_dimension, false); bound > capacity) {
      needed = bound;
      return {};
    }
  }

  // The filter decides on the public charge alone (Thm 4.3).
  const double charge = plan->charged_rho;
  if (!admit_or_halt(filter, charge, [&] {
        if (auto s = ledger->record_halt(); !s) ledger_status = s;  // fail closed from now on
      })) {
    Reply reply;
    reply.id = id;
    reply.status = ReplyStatus::refused_budget;
    reply.remaining_budget = filter.remaining();
    return finish(std::move(reply));
  }

  // From admission on, the outcome depends on public data only: the release cannot fail for a
  // plan_release plan, and it runs in a paced window whose length is public (privatizer.md).
  const auto paced_until = pace_from_now(pacing.window(spec, output_dimension));
  RandomBits bits(*random);
  const Status released =
      release_statistic(spec, component->second.value, *plan, bits, scratch, noisy);
  pace_until(paced_until);
  if (!released) return finish(rejected(id, released.error()));

  Reply reply;
  reply.id = id;
  reply.status = ReplyStatus::answered;
  reply.values = noisy;
  reply.charged_rho = charge;
  reply.remaining_budget = filter.remaining_after(charge);
  std::string reply_bytes = wire::serialize(wire::reply_to_wire(reply));

  // Charge before release: the reply exists only in this function until the ledger has it.
  if (auto s = ledger->record_answer(id, AnsweredRequest{digest, charge, reply_bytes},
                                     filter.spent(), filter.spent_after(charge));
      !s) {
    return finish(ledger_failed(id, s.error()));
  }
  filter.commit(charge);
  bytes = std::move(reply_bytes);
  return reply;
}

Device::Device(std::unique_ptr<State> state) : state_(std::move(state)) {}
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;
Device::~Device() = default;

Device Device::open(const DeviceConfig& config, std::unique_ptr<Ledger> ledger,
                    std::unique_ptr<RandomSource> random) {
  auto state = std::make_unique<State>(config, std::move(ledger), std::move(random));
  // A device with secure randomness serves real users: paced unless its owner says otherwise
  // (set_pacing), so that no release's timing depends on where the user is.
  if (state->random && state->random->is_secure()) state->pacing = ReplyPacing::device_default();
  if (!state->ledger || !state->random) {
    state->ledger_status = make_error(ErrorCode::ledger_failure, "ledger",
                                      "ledger: a device needs a ledger and a random source");
    return Device(std::move(state));
  }
  auto loaded = state->ledger->load(config);
  if (!loaded) {
    state->ledger_status = loaded.error();
  } else if (!std::isfinite(loaded->spent) || loaded->spent < 0) {
    state->ledger_status =
        make_error(ErrorCode::ledger_failure, "ledger", "ledger: recorded spent budget is invalid");
  } else {
    state->filter = PrivacyFilter(config, loaded->spent, loaded->halted);
    state->expost_spent = loaded->expost_spent;
  }
  return Device(std::move(state));
}

Expected<Device> Device::open_secure(const DeviceConfig& config, const char* ledger_path) {
  auto random = SecureRandom::create();
  if (!random) return random.error();
  std::unique_ptr<Ledger> ledger;
  if (ledger_path)
    ledger = std::make_unique<SqliteLedger>(ledger_path);
  else
    ledger = std::make_unique<MemoryLedger>();
  return open(config, std::move(ledger), std::move(*random));  // paced: secure randomness
}

Device Device::open_for_simulation(const DeviceConfig& config, std::uint64_t seed,
                                   std::uint64_t stream) {
  return open(config, std::make_unique<MemoryLedger>(),
              std::make_unique<SimulationRandom>(seed, stream));
}

Status Device::register_component(std::string_view id, std::size_t dimension,
                                  std::string_view unit) {
  if (id.empty() || id.size() > wire::kMaxIdBytes) {
    return make_error(ErrorCode::invalid_argument, "component_id",
                      "component_id must have 1 to " + std::to_string(wire::kMaxIdBytes) +
                          " bytes, got " + std::to_string(id.size()));
  }
  CGP_RETURN_IF_ERROR(require_count_in("dimension", dimension, 1, wire::kMaxDimension));
  if (unit.size() > 32) {
    return make_error(ErrorCode::too_large, "unit",
                      "unit must have at most 32 bytes, got " + std::to_string(unit.size()));
  }
  auto [it, inserted] = state_->components.try_emplace(std::string(id));
  if (!inserted && it->second.dimension != dimension) {
    return make_error(ErrorCode::dimension_mismatch, "dimension",
                      "component_id '" + std::string(id) + "' is registered with dimension " +
                          std::to_string(it->second.dimension) + ", not " +
                          std::to_string(dimension));
  }
  if (!inserted && it->second.unit != unit) {
    return make_error(ErrorCode::invalid_argument, "unit",
                      "component_id '" + std::string(id) + "' is registered with unit '" +
                          it->second.unit + "', not '" + std::string(unit) + "'");
  }
  it->second.dimension = dimension;
  it->second.unit = std::string(unit);
  return {};
}

Status Device::set_component(std::string_view id, std::span<const double> values) {
  auto it = state_->components.find(std::string(id));
  if (it == state_->components.end()) {
    return make_error(ErrorCode::unknown_component, "component_id",
                      "component_id '" + std::string(id) + "' is not registered");
  }
  CGP_RETURN_IF_ERROR(require_dimension("values", values, it->second.dimension));
  CGP_RETURN_IF_ERROR(require_all_finite("values", values));
  it->second.value.assign(values.begin(), values.end());
  it->second.frame.reset();  // metres as given: no frame claimed
  it->second.lonlat.reset();
  return {};
}

HandleResult Device::handle(std::span<const std::uint8_t> request_bytes,
                            std::size_t reply_capacity) noexcept {
  State& s = *state_;
  HandleResult result;
  try {
    auto parsed = wire::parse_device_request(request_bytes);
    if (!parsed) {
      result.reply = wire::serialize(wire::reply_to_wire(s.rejected({}, parsed.error())));
    } else if (auto request = wire::request_from_wire(*parsed); !request) {
      RequestId id{wire::cut_utf8(parsed->id().query_id(), wire::kMaxIdBytes),
                   parsed->id().round()};
      result.reply = wire::serialize(wire::reply_to_wire(s.rejected(id, request.error())));
    } else {
      const std::string canonical = wire::serialize(wire::request_to_wire(*request));
      s.process(*request, digest_of(canonical), result.reply, reply_capacity, result.needed);
      return result;
    }
  } catch (...) {
    // Nothing is charged on this path: a charge is recorded only as the last step of process().
    result.reply.clear();
    try {
      result.reply = wire::serialize(wire::reply_to_wire(s.rejected(
          {}, make_error(ErrorCode::internal_error, "request",
                         "the device could not process this request; nothing was charged"))));
    } catch (...) {
      result.reply.clear();
    }
  }
  if (result.reply.size() > reply_capacity) {
    result.needed = result.reply.size();
    result.reply.clear();
  }
  return result;
}

std::string Device::handle(std::span<const std::uint8_t> request_bytes) noexcept {
  return handle(request_bytes, kUnbounded).reply;
}

Reply Device::handle(const DeviceRequest& request) noexcept {
  try {
    std::string bytes;
    std::size_t needed = 0;
    const std::string canonical = wire::serialize(wire::request_to_wire(request));
    return state_->process(request, digest_of(canonical), bytes, kUnbounded, needed);
  } catch (...) {
    Reply reply;
    reply.status = ReplyStatus::rejected_invalid;
    reply.error.code = ErrorCode::internal_error;
    return reply;
  }
}

Expected<std::size_t> Device::max_reply_size(std::span<const std::uint8_t> request_bytes) const {
  // A reply is at most: the id, status, a cut error message, one double per output coordinate
  // and the two budgets — or, for a replay, the stored bytes.
  std::size_t dimension = 1;
  RequestId id;
  std::size_t stored = 0;
  if (auto parsed = wire::parse_device_request(request_bytes)) {
    id = {wire::cut_utf8(parsed->id().query_id(), wire::kMaxIdBytes), parsed->id().round()};
    if (parsed->has_location()) {
      auto it = state_->components.find(parsed->component_id());
      if (it != state_->components.end()) dimension = it->second.dimension;
    }
    if (state_->ledger_status.ok()) {
      if (auto recorded = state_->ledger->find(id); recorded && recorded->has_value())
        stored = (*recorded)->reply.size();
    }
  }
  return std::max(stored, reply_size_bound(id, dimension, true));
}

void Device::set_pacing(const ReplyPacing& pacing, std::shared_ptr<PacingClock> clock) {
  state_->pacing = pacing;
  if (clock) state_->clock = std::move(clock);
}
const ReplyPacing& Device::pacing() const noexcept {
  return state_->pacing;
}
std::uint64_t Device::pacing_overruns() const noexcept {
  return state_->pacing_overruns;
}

double Device::remaining() const noexcept {
  return state_->ledger_status.ok() ? state_->filter.remaining() : 0.0;
}
double Device::spent() const noexcept {
  return state_->filter.spent();
}
const DeviceConfig& Device::config() const noexcept {
  return state_->config;
}
bool Device::secure_randomness() const noexcept {
  return state_->random && state_->random->is_secure();
}
const Status& Device::ledger_status() const noexcept {
  return state_->ledger_status;
}

}  // namespace cgp::client

// One Device is one user (DESIGN §2, §4): it keeps the user's components and privacy filter and
// answers a coordinator's requests by releasing φ(x) + (K/√(2ρ))·Z, charged before release.
// A Device is not thread-safe: one thread at a time (one per device in the fleet).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cgp/client/filter.hpp"
#include "cgp/client/ledger.hpp"
#include "cgp/client/pacing.hpp"
#include "cgp/client/random.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/request.hpp"
#include "cgp/common/watch.hpp"

namespace cgp::client {

// The device's reply is common's DeviceReply (cgp/common/request.hpp), so that fleets and the
// wire codec read the same type.
using ReplyStatus = cgp::ReplyStatus;
using Reply = cgp::DeviceReply;

// The wire path's result: the serialized reply, or (reply empty, needed > 0) the length a
// reply would have needed when it does not fit the caller's capacity — then nothing was
// evaluated or charged, and a retry with `needed` bytes gets the reply.
struct HandleResult {
  std::string reply;
  std::size_t needed = 0;
};

enum class WatchStartStatus {
  armed,           // armed now, or armed before with the same spec (replayed: charged once)
  refused_budget,  // the charge does not fit the filter: nothing armed, charged or drawn
};

struct WatchArming {
  WatchStartStatus status = WatchStartStatus::armed;
  bool replayed = false;        // this spec was armed before: nothing was charged by this call
  double charged_rho = 0;       // ρ the watch cost the CGP filter (at its first arming)
  double remaining_budget = 0;  // in ρ units, now
  // Pairs of trajectories closer than this (dist_∞) are protected as if this far apart
  // (watch.md); about a centimetre for 2-D locations.
  double resolution = 0;
};

class Device {
 public:
  // A device with this filter, ledger and randomness; with secure randomness it is paced
  // (ReplyPacing::device_default()) from the start. If the ledger cannot be loaded the
  // device still opens but fails closed: every request is rejected with ledger_failure and
  // ledger_status() says why; the budget is never reset.
  static Device open(const DeviceConfig& config, std::unique_ptr<Ledger> ledger,
                     std::unique_ptr<RandomSource> random);
  // Secure randomness; ledger in memory (nullptr path) or in the SQLite file at `ledger_path`.
  static Expected<Device> open_secure(const DeviceConfig& config, const char* ledger_path);
  // For simulations only: in-memory ledger and the seeded SimulationRandom(seed, stream).
  static Device open_for_simulation(const DeviceConfig& config, std::uint64_t seed,
                                    std::uint64_t stream);

  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  ~Device();

  // Components (§5, Remark 4): a location now, earlier locations as new components, or any
  // vector. `unit` names the unit of distance that ρ refers to ("m" for projected locations;
  // at most 32 bytes, may be empty). Registering an existing id again with another dimension
  // or unit is an error.
  Status register_component(std::string_view id, std::size_t dimension, std::string_view unit = "");
  Status set_component(std::string_view id, std::span<const double> values);

  // Location frames (docs/protocol.md): the coordinator announces how its metres come from
  // GPS lon/lat (Welcome.frame); set_location_frame keeps it, and set_location_lonlat projects
  // a fix on the device into a 2-D component in metres (registered with unit "m" on first
  // use) with geometry::FrameProjection: the frame's own projection within
  // FrameProjection::kServiceRadius (1,500 km) of its origin, a public clamp beyond, so that
  // what is released is Lipschitz in ground metres with constant ≤ 1.0094 (plus ≤ 1 cm) for every
  // accepted frame and every pair of fixes (common/src/geometry/frame_projection.md). No outcome
  // depends on the fix: a valid fix is always placed (the latest one is the one answered
  // from), and a new frame re-projects it. Only local frames are accepted; a Mercator frame is
  // refused by set_location_frame (invalid_argument "frame.projection") wherever the user is.
  // A request stamped with another frame than the one a component was projected in is
  // rejected (invalid_argument naming "frame"), charged nothing; set_component (metres as
  // given) claims no frame. Errors: the frame's; lon/lat out of range name "lon"/"lat";
  // set_location_lonlat before any frame is invalid_argument "frame".
  Status set_location_frame(const geometry::LocationFrame& frame);
  const std::optional<geometry::LocationFrame>& location_frame() const noexcept;
  Status set_location_lonlat(std::string_view id, double lon, double lat);

  // The wire path: parses a serialized cgp.v1.DeviceRequest and returns the serialized
  // cgp.v1.DeviceReply. A replayed request gets the identical bytes. Never throws: an
  // unexpected failure is an internal_error reply, with nothing charged.
  std::string handle(std::span<const std::uint8_t> request_bytes) noexcept;
  // The same, never producing more than `reply_capacity` bytes (C ABI buffers): a reply that
  // would not fit — a fresh answer's bound, or a replay's stored bytes, whatever component is
  // registered now — is not produced and nothing is charged (HandleResult::needed).
  HandleResult handle(std::span<const std::uint8_t> request_bytes,
                      std::size_t reply_capacity) noexcept;
  // The in-process path (the simulated fleet): the same rules without parsing.
  Reply handle(const DeviceRequest& request) noexcept;

  // Watches (client-sdk/src/watch.md): device-side Above Threshold. start_watch validates the
  // spec against this device, charges the CGP filter ρ = (ε(1 + 2^-10))²/2 once and records the
  // charge with the watch's secret threshold noise before it returns armed. Starting the same
  // spec again returns the recorded arming (replayed, no new charge); the same id with another
  // spec is request_conflict. A refusal follows the filter's rules (sticky HALT included).
  // Errors (nothing charged): the spec's, unknown_component, dimension_mismatch, out_of_range
  // (ε so small that the charge is below min_rho), ledger_failure.
  Expected<WatchArming> start_watch(const WatchSpec& spec) noexcept;
  // tick_watch evaluates the watch at `tick` on the component's current value: alert at the
  // first noisy crossing, silent otherwise, and the decision is durable before it returns (a
  // repeated tick returns it again, also after a restart). Ticks are 1..horizon, increasing,
  // on a public schedule: which ticks are evaluated must not depend on the user's data (a skip
  // because the phone was off is fine; a skip because it did not move is not). After an
  // alert, later ticks are finished. Errors (nothing evaluated or recorded): unknown_watch,
  // out_of_range "tick" (0, past the horizon, before the last evaluated tick),
  // component_not_set, dimension_mismatch, ledger_failure.
  Expected<WatchTickStatus> tick_watch(std::string_view watch_id, std::uint64_t tick) noexcept;
  // The wire form of start_watch: a serialized cgp.v1.WatchSpec in, a serialized
  // cgp.v1.WatchStarted out (status armed, refused_budget or rejected_invalid with the error).
  std::string start_watch(std::span<const std::uint8_t> spec_bytes) noexcept;
  // The ex-post budget's realised ε (gaussian_expost watches).
  double expost_spent() const noexcept;
  // What the ledger recorded for a watch: its spec, the last tick evaluated and the alerting
  // tick (0: none) — so that a device client resumes after a restart and re-sends an alert
  // that may not have left before a crash. unknown_watch if it was never armed here.
  struct WatchState {
    WatchSpec spec;
    std::uint64_t last_tick = 0, alert_tick = 0;
    bool budget_exhausted = false;
  };
  Expected<WatchState> watch_state(std::string_view watch_id) const noexcept;

  // A reply size that handle() will not exceed for this request now (replays included).
  Expected<std::size_t> max_reply_size(std::span<const std::uint8_t> request_bytes) const;

  // Timing (privatizer.md, "Timing"): with pacing enabled, the work that touches the user's
  // data and the noise is padded to a window computed from public data. A device opened with
  // secure randomness (open_secure, or open with a secure RandomSource) starts with
  // ReplyPacing::device_default(); simulations run unpaced. `clock` replaces the steady clock
  // (tests); nullptr keeps the current one.
  void set_pacing(const ReplyPacing& pacing, std::shared_ptr<PacingClock> clock = nullptr);
  const ReplyPacing& pacing() const noexcept;
  // Releases whose work did not fit their window (their timing then says "slow", nothing else).
  std::uint64_t pacing_overruns() const noexcept;

  double remaining() const noexcept;
  double spent() const noexcept;
  const DeviceConfig& config() const noexcept;
  bool secure_randomness() const noexcept;
  // ok, or the ledger_failure that makes the device refuse everything.
  const Status& ledger_status() const noexcept;

 private:
  struct State;
  explicit Device(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::client

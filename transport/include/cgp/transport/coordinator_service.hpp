// A coordinator as a network service (cgp-coordinator serve): devices dial in on the device
// gateway, analysts submit queries on the Analyst service of the same port, and the queries run
// over the connected devices through the same query code as the in-process fleet.
//
// The coordinator is untrusted (DESIGN §2): every budget is enforced on the devices. What it keeps
// is a worst-case mirror of their budgets (Alg. 2), so that it never asks for what a device no
// longer has, and spreads what is left over later queries (Alg. 3, open-ended).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cgp/common/device_config.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/transport/gateway.hpp"

namespace cgp::transport {

struct CoordinatorOptions {
  GatewayOptions gateway;  // listen address, TLS, device credentials, log
  // The users, in the order analysts index them (the enrolment order); CoordinatorService::enrol
  // appends more while it runs.
  std::vector<std::string> device_ids;
  // Of device_ids, those revoked before this start (an enrolment file's "id,revoked" lines): they
  // keep their user index, are never asked, and cannot connect (give them no credential digest).
  std::vector<std::string> revoked_device_ids;
  std::size_t dimension = 2;  // of the component queries are about
  std::string component_id = "location";
  double device_budget = 1.0;  // each device's total ρ (its CGP filter)
  std::chrono::milliseconds round_deadline{5000};
  // Check-in fleets (phones that connect now and then): round_deadline is then each round's
  // window; devices not connected when a round starts get its request when they check in
  // within it, and those that do not are reported (not_reached) and charged nothing.
  bool check_in = false;
  std::size_t horizon = 20;  // adaptive allocation for queries that give no ρ
  // The shortest watch tick the fleet's devices accept (link::WatchLimits::min_tick_seconds, 1 s
  // by default): a shorter one is refused before it is sent, as every device would refuse it.
  double watch_min_tick_seconds = 1;
  // Finished results and the budget mirror are kept in this SQLite file (one coordinator per
  // file) and restored at start; empty: memory only, lost on restart.
  std::string state_path;
  // A state file that exists but is empty (it lost its contents: the mirror, the used query
  // ids) is refused unless this is set, which starts it anew. A missing file is always made.
  bool init_state = false;
  // Finished results kept (in memory and in the state file): the newest max_results, each at
  // most max_age old. GetResult on an older id is NOT_FOUND.
  struct Retention {
    std::size_t max_results = 10000;
    std::chrono::seconds max_age{30 * 24 * 3600};
  } retention;
  // A result's per-user lists go out in pages of at most this many entries (~14 bytes each:
  // ~1 MB); the client asks GetResult for the rest.
  std::size_t result_page_entries = 65536;
  // The analyst's own port: "HOST:PORT" for the Analyst API, grpc.health.v1 and
  // reflection, with its own connection caps (analyst_limits), so that devices filling the
  // device port never lock operators and health checks out. Empty: served on the device port
  // (small deployments; devices can then take every connection an analyst would need).
  std::string analyst_address;
  ConnectionLimits analyst_limits = default_analyst_limits();
  static ConnectionLimits default_analyst_limits() {
    ConnectionLimits limits;
    limits.max_connections = 256;
    limits.max_connections_per_address = 64;
    return limits;
  }
  // The console (docs/console.md): an HTTP API over the same queries as the Analyst API, and
  // the page in console_assets_dir, on its own "HOST:PORT", with the analyst credential and the
  // device port's TLS material. Empty: none.
  std::string console_address;
  std::string console_assets_dir;  // empty: the API only
  // A tile server for the page's background ("https://host/{z}/{x}/{y}.png"), placed around
  // gateway.frame's origin (needs a local frame). Empty: the offline map only.
  std::string console_tiles_url;
  // Prometheus text endpoint (GET /metrics) on its own "HOST:PORT"; empty: none.
  std::string metrics_address;
  // SHA-256 of the analyst credential. Unset: analyst calls are not checked (loopback tests only).
  std::optional<CredentialSha256> analyst_credential_sha256;
  // How long a stop drains first (start_draining): health checks and watches hear NOT_SERVING
  // while everything else is served, so that load balancers take the coordinator out before it
  // goes. Long enough for a load balancer's unhealthy threshold (interval × failures). 0 (the
  // default): no drain — in-process users and tests stop at once. At most kMaxDrain.
  std::chrono::milliseconds drain{0};
  static constexpr std::chrono::milliseconds kMaxDrain{10 * 60 * 1000};
};

// What CoordinatorService::enrol did.
struct EnrolOutcome {
  coordinator::UserId user = 0;     // its index: the next one for a new id, its old one otherwise
  bool new_user = false;            // an id not enrolled before in this run
  bool readmitted = false;          // revoked before: admitted and asked again
  bool credential_changed = false;  // enrolled, not revoked, now with another credential
};

class CoordinatorService {
 public:
  static Expected<std::unique_ptr<CoordinatorService>> start(const CoordinatorOptions& options);
  ~CoordinatorService();  // closes every stream
  int port() const noexcept;
  int metrics_port() const noexcept;  // 0 without a metrics endpoint
  int console_port() const noexcept;  // 0 without a console
  // The analyst's port: analyst_address's, else the device port.
  int analyst_port() const noexcept;
  DeviceGateway& gateway() noexcept;
  // A stop begins (cgp-coordinator serve: the first SIGTERM or SIGINT): grpc.health.v1 on every
  // port says NOT_SERVING of every service from now on (Check and Watch), and devices, analyst
  // calls and queries go on. Returns when the drain ends (now + options.drain): destroy the
  // service then, or earlier to stop at once.
  std::chrono::steady_clock::time_point start_draining();
  // Takes an enrolled device out without a restart: its stream ends, it cannot connect again,
  // and later queries leave it out (user indices do not change). Errors: an id not enrolled.
  // Returns false if it was revoked before.
  Expected<bool> revoke(const std::string& device_id);
  // Enrols a device without a restart (cgp-coordinator serve follows its enrolment file so).
  // A new id becomes the next user and can connect at once; queries and watches that start from
  // then on ask it (one in progress keeps its users). A known id keeps its user index and its
  // budget mirror (never raised: the mirror is a worst case of what the device has spent), is
  // admitted again if it was revoked, and from now on needs this credential: its old one stops
  // working at once and a stream it holds under it is ended. Errors: device_id not a valid id,
  // or too many devices (too_large).
  Expected<EnrolOutcome> enrol(const std::string& device_id,
                               const CredentialSha256& credential_sha256);

 private:
  struct Impl;  // in the .cpp
  explicit CoordinatorService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgp::transport

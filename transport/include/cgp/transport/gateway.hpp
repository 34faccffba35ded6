// The coordinator's side of the network (DESIGN §4): a gRPC server devices dial into, and a
// Fleet over the connected devices, so that the query engine runs unchanged over the network.
//
// Device streams run on gRPC's completion-queue API over a fixed set of threads: no thread
// per device.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/transport/credentials.hpp"

namespace grpc {
class Service;
}
namespace cgp::v1 {
class WatchSpec;
class WatchReport;
}  // namespace cgp::v1

namespace cgp::transport {

class NetworkFleet;

// What one peer, and everyone together, may hold open. Every limit is applied
// before a credential is looked at; the defaults suit one coordinator of tens of thousands of
// devices. README "Network" lists them.
// Calls of one kind other than device streams (health checks and Watch, server reflection,
// analyst calls): counted at their headers per TCP connection, per peer address and in all,
// before the request is read (gRPC would hold a call waiting for its request outside every
// cap). Over a cap a call ends at once, RESOURCE_EXHAUSTED. A stream ends after its lifetime
// (the client opens another); a unary call's request must come within it.
struct StreamCaps {
  std::size_t total = 1024;
  std::size_t per_address = 64;
  std::size_t per_connection = 8;
  std::chrono::milliseconds lifetime{300000};
};

struct ConnectionLimits {
  // Open TCP connections in all; lowered at start to the descriptor budget (the soft
  // RLIMIT_NOFILE, raised to the hard one, less an eighth and at least 128 kept for files).
  std::size_t max_connections = 20000;
  // Per peer IP address (devices behind one NAT share an address).
  std::size_t max_connections_per_address = 256;
  // From TCP accept to the client's HTTP/2 SETTINGS (TLS included): slow or silent clients
  // are cut after this.
  std::chrono::milliseconds handshake_timeout{10000};
  // A connection with no call open is closed after this (devices hold one long call).
  std::chrono::milliseconds idle_timeout{300000};
  // HTTP/2 streams one connection may have open at once (a device needs one; the load-test
  // swarm multiplexes 500 devices on a connection), as announced in SETTINGS. gRPC 1.51 holds
  // only peers that acknowledged it to this; against others the per-kind caps below hold (a
  // connection keeps at most max_pending_streams_per_address streams before Hello and each
  // StreamCaps::per_connection of the other kinds).
  std::size_t max_streams_per_connection = 1024;
  // Device streams not yet past Hello, in all and per peer address; more are ended at once
  // (RESOURCE_EXHAUSTED). Each costs ~17 KB until its Hello or the hello timeout, so these bound
  // what unauthenticated clients can make the coordinator hold (~140 MB in all).
  std::size_t max_pending_streams = 8192;
  std::size_t max_pending_streams_per_address = 1024;
  // HTTP/2 keepalive pings on idle connections, so that NATs and load balancers keep device
  // streams open and a peer that vanished is noticed: a ping after keepalive_time of silence,
  // the connection closed when it is not acknowledged within keepalive_timeout.
  std::chrono::milliseconds keepalive_time{60000};
  std::chrono::milliseconds keepalive_timeout{20000};
  // grpc.health.v1 Watch streams (~20 KB each: ≤ 20 MB in all) and server reflection streams
  // (grpcurl list/describe: one short stream per command).
  StreamCaps health_watches{1024, 64, 8, std::chrono::milliseconds(300000)};
  StreamCaps reflection_streams{64, 16, 4, std::chrono::milliseconds(60000)};
  // grpc.health.v1 Check (answered at once: held only while a client withholds its request,
  // which a prober sends with its headers; 4,096 such at ~18 KB: ~72 MB).
  StreamCaps health_checks{4096, 64, 8, std::chrono::milliseconds(1000)};
  // Analyst calls with the analyst credential (others end at their headers, UNAUTHENTICATED),
  // waiting or running: queries run one at a time, reads (status, results, watches) beside.
  StreamCaps analyst_calls{1024, 256, 256, std::chrono::milliseconds(10000)};
};

// Pace steering (docs/protocol.md §3): when a stopping coordinator told each device to come back.
// Device `id` was told delay(id) = SipHash-2-4(key, id) mod window_ms after stopped_at_ms: public
// values (an id and a random key), nothing about a user. Kept across a restart (cgp-coordinator
// keeps it in its state file), so that the next process can tell a device that did not wait.
struct ReconnectPlan {
  std::uint64_t stopped_at_ms = 0;  // Unix time of the stop, ms
  std::uint64_t window_ms = 0;      // 0: no delay was given
  std::array<std::uint8_t, 16> key{};
  std::uint64_t delay_ms(std::string_view device_id) const;
};

struct GatewayOptions {
  std::string address = "127.0.0.1:0";  // port 0 picks a free port
  // TLS: PEM server certificate chain and private key. Empty: plaintext (loopback tests only).
  std::string tls_certificate_chain, tls_private_key;
  // device id -> credential. Non-empty: a device must present its own id's credential in Hello,
  // or its connection is refused (UNAUTHENTICATED) before it can take part.
  std::map<std::string, std::string> device_credentials;
  // The same by SHA-256 digest, as an enrolment file keeps them (the secrets stay on devices).
  std::map<std::string, CredentialSha256> device_credential_digests;
  // Further gRPC services served on the same port (e.g. the analyst service), each made once;
  // `name` (e.g. "cgp.v1.Analyst") is what health checks and reflection know it by.
  struct ExtraService {
    std::string name;
    std::function<std::unique_ptr<grpc::Service>()> make;
  };
  std::vector<ExtraService> extra_services;
  // The lean device transport (docs/protocol.md §2b): TLS 1.3 frames on a port of its own, with
  // the same certificate, credentials, caps and rounds as the gRPC device port, at about a third
  // of the memory and a fifth of the CPU per device (README "Network load"). Empty: not served.
  // Needs TLS (tls_certificate_chain, tls_private_key).
  std::string frames_address;
  // Its connections are driven by this many epoll threads (no thread per device).
  std::size_t frame_loops = 2;
  // Pace steering (docs/protocol.md §3): a coordinator that stops tells each connected device to
  // come back after a delay of its own, spread so that about this many devices return per
  // second, rather than all at once (a TLS handshake costs the coordinator ~1 ms of CPU).
  // 0: no delay is given.
  std::size_t reconnect_rate = 1000;
  // The plan of the previous stop, if any: while its window lasts, a device that comes back more
  // than kEarlySlack before its time is refused by name (UNAVAILABLE, reason before-its-window,
  // with the time it has left as retry_after) and nothing else: it is admitted once it is due.
  std::optional<ReconnectPlan> previous_stop;
  static constexpr std::chrono::milliseconds kEarlySlack{250};
  // A gateway of the live tier serves some virtual shards of a fleet of `virtual_shards`
  // (docs/protocol.md §2c): a Hello from a device of any other shard (its shard is public, from
  // its id) is refused by name before its credential is looked at — UNAVAILABLE, "shard", with
  // a retry_after: the shard is moving or this gateway is reloading, and the device's backoff
  // brings it back. 0: every device is this gateway's.
  std::uint32_t virtual_shards = 0;
  std::vector<std::uint32_t> served_shards;
  static constexpr std::uint32_t kShardRetryAfterMs = 1000;
  // Device streams are spread over this many completion queues, a thread each (not a thread
  // per device). More queues make each completion cheaper when many devices are connected.
  std::size_t completion_queues = 8;
  // The frame of the coordinator's locations: announced in every Welcome and stamped
  // on every request, so that devices project their GPS lon/lat with it and refuse a request
  // in another frame. None: locations are metres as the devices give them.
  std::optional<geometry::LocationFrame> frame;
  // A connection that has not said Hello by then is ended (counted as refused).
  std::chrono::milliseconds hello_timeout{10000};
  ConnectionLimits limits;
  // Structured log: one line per event ("event=connect device=d-17"), e.g. to stderr; called
  // from several threads at once. Empty: no log.
  std::function<void(const std::string&)> log;
  // Watches kept from before (each a serialized cgp.v1.WatchReport): in place before the first
  // device connects, so a restarted coordinator still sends pending watches and still knows
  // who alerted.
  std::vector<std::string> watches;
  // Called after every change, one call at a time and in order, e.g. to keep watches in a state
  // file: (watch id, "", serialized cgp.v1.WatchReport) for a new watch; (watch id, device id,
  // serialized cgp.v1.DeviceWatch) when one device answered or alerted.
  std::function<void(const std::string&, const std::string&, const std::string&)> watch_changed;
};

// What the gateway has seen since it started.
struct GatewayCounters {
  std::uint64_t connects = 0, disconnects = 0, refused_connections = 0;
  // TCP connections closed at accept: over the total cap, over the per-address cap, or while
  // the process had no descriptor to spare; streams ended for the pending-stream caps.
  std::uint64_t refused_total_cap = 0, refused_address_cap = 0, refused_descriptors = 0,
                refused_pending_streams = 0;
  // Hellos of devices back before the time the previous stop gave them (refused, named).
  std::uint64_t refused_early = 0;
  std::uint64_t open_connections = 0;  // TCP connections open now (a gauge)
  std::uint64_t rounds = 0, requests = 0, replies = 0, unanswered = 0;
  std::uint64_t late_replies = 0;  // replies to rounds already closed (or never asked)
  // Rounds that ended by their deadline with devices still silent (the others ended with the
  // last reply), and the time all rounds spent waiting for replies.
  std::uint64_t rounds_to_deadline = 0, round_wait_microseconds = 0;
};

// One round as the gateway ran it (DeviceGateway::recent_rounds): counts only, public values
// (who was asked and what kind of reply came back), for operators' consoles.
struct RoundSummary {
  std::string query_id;
  std::uint32_t round = 0;
  std::uint64_t asked = 0, sent = 0, answered = 0, refused = 0, rejected = 0, unanswered = 0,
                not_reached = 0;
  bool ended_by_deadline = false;
  double milliseconds = 0;         // from the first request out to the round's end
  std::int64_t ended_unix_ms = 0;  // wall clock at the round's end
};

class DeviceGateway {
 public:
  // How many of the latest rounds recent_rounds() keeps.
  static constexpr std::size_t kRecentRounds = 64;
  static Expected<std::unique_ptr<DeviceGateway>> start(const GatewayOptions& options);
  // Plaintext, no credentials.
  static Expected<std::unique_ptr<DeviceGateway>> start(const std::string& address);
  ~DeviceGateway();
  // The device frames port (GatewayOptions::frames_address), 0 when not served.
  int frames_port() const noexcept;
  // Ends every device's stream, each with a Goodbye that says when to come back (spread over
  // the fleet at reconnect_rate), and stops serving; the plan it gave, for the next process.
  // The destructor does the same if this was not called.
  ReconnectPlan stop();
  int port() const noexcept;
  std::size_t connected() const;
  GatewayCounters counters() const;
  // The latest rounds (at most kRecentRounds), oldest first.
  std::vector<RoundSummary> recent_rounds() const;
  // The round waiting for replies now, if any: `answered` counts the devices no longer awaited
  // (answered, or gone), `milliseconds` the time since it started.
  std::optional<RoundSummary> round_in_progress() const;
  // The total connection cap in force (ConnectionLimits::max_connections, or the descriptor
  // budget when that is lower).
  std::size_t max_connections() const noexcept;
  // Takes a device out for good: its stream is ended and every later Hello with its id is
  // refused (UNAUTHENTICATED), whatever credential it presents. False if it was already revoked.
  bool revoke(const std::string& device_id);
  // Admits a device with this credential from now on, without a restart: a new id, or a revoked
  // one again (admitted), or an enrolled one with another credential (credential_changed: its
  // old credential stops working at once, and a stream it holds under it is ended). A gateway
  // started without any credential checks none, also of devices enrolled later.
  enum class Enrolled { unchanged, admitted, credential_changed };
  Enrolled enrol(const std::string& device_id, const CredentialSha256& digest);
  // grpc.health.v1 status of a further service served on this port (e.g. "cgp.v1.Analyst").
  void set_serving(const std::string& service, bool serving);
  // Before a stop: grpc.health.v1 says NOT_SERVING of every service from now on, so that load
  // balancers drain this port; devices, calls and everything else are served as before.
  void drain_health();
  // A watch (README "Watches") over these devices (user index, device id): sent to each now if
  // connected, else when it connects; already_exists for a used watch_id. The spec is sent as
  // given: each device validates it and decides within its own budget.
  Status start_watch(const v1::WatchSpec& spec,
                     const std::vector<std::pair<std::uint32_t, std::string>>& devices);
  // What each device of the watch answered and its alert, if any; invalid_argument for an
  // unknown id.
  Expected<v1::WatchReport> watch_report(const std::string& watch_id) const;
  // Waits until at least `count` devices have said Hello, or the timeout passes.
  bool wait_for_devices(std::size_t count, std::chrono::milliseconds timeout) const;
  // One round of a query (NetworkFleet::ask): user u is device_ids[u]. Sends each asked
  // device its request (the coordinator's frame set), collects replies into `replies` (already
  // sized) until every asked device answered or went away or `deadline` passed, counts and logs
  // the round. check_in: a device not connected gets its request if it checks in before the
  // deadline, else its slot is not_delivered; otherwise such a slot is no_answer.
  void run_round(const coordinator::RoundRequest& request, std::span<const std::string> device_ids,
                 bool check_in, std::chrono::milliseconds deadline,
                 coordinator::RoundReplies& replies);

 private:
  struct Impl;
  explicit DeviceGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Users are devices by id: user i is device_ids[i]. A device that is not connected, or does not
// answer within the round deadline, is reported as no_answer.
//
// Check-in fleets (set_check_in): phones that connect only now and then (Android WorkManager,
// iOS background tasks). The round deadline is then a window (minutes): a device not connected
// when a round starts gets the round's request when it checks in within the window; one that
// does not is not_delivered — reported in QueryReport::not_reached and charged nothing, on the
// device (it never saw the request) and in the budget mirror.
class NetworkFleet final : public coordinator::Fleet {
 public:
  NetworkFleet(DeviceGateway& gateway, std::vector<std::string> device_ids, std::size_t dimension,
               double initial_budget, std::chrono::milliseconds round_deadline);
  std::size_t size() const noexcept override { return device_ids_.size(); }
  std::size_t dimension() const noexcept override { return dimension_; }
  double initial_budget() const noexcept override { return initial_budget_; }
  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override;
  void set_check_in(bool on) noexcept { check_in_ = on; }
  // Devices enrolled since: the next users, in this order. Between queries only (under the
  // caller's query lock): a query keeps the users it started with.
  void add_devices(std::vector<std::string> device_ids);
  // Called with each round before any of its requests leaves, e.g. to write down the round's
  // worst-case charges (a coordinator's intents). An error sends nothing: every slot
  // is not_delivered (nothing released, nothing charged) and the caller reports the error.
  using RoundGate = std::function<Status(const coordinator::RoundRequest&)>;
  void set_before_round(RoundGate gate) { before_round_ = std::move(gate); }
  // Rounds this fleet has been asked to run, counted before anything of them is written or
  // sent: a query that fails with this unchanged asked no device.
  std::uint64_t rounds_begun() const noexcept { return rounds_begun_; }

 private:
  DeviceGateway& gateway_;
  std::vector<std::string> device_ids_;
  std::size_t dimension_;
  double initial_budget_;
  std::chrono::milliseconds round_deadline_;
  bool check_in_ = false;
  RoundGate before_round_;
  std::uint64_t rounds_begun_ = 0;  // under the caller's query lock, as ask() is
};

}  // namespace cgp::transport

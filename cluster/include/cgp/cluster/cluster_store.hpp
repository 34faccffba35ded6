// The live tier's durable, shared state in PostgreSQL (docs/cluster.md): the fleet's settings,
// enrolment, gateway leases, shard ownership, the coordinator's lease, query intents and
// results, per-round counters and the budget mirror as one blob per shard. Every process of a
// cluster (coordinator, standby, gateways, `cgp-coordinator cluster` commands) holds one.
//
// Fencing: a shard is owned under an epoch that rises with every move, the coordinator leads
// under an epoch that rises with every new leader; a write that needs ownership or leadership
// names the epoch it holds and changes nothing when that is stale (`stale_epoch`: an error
// naming "epoch"). Every error names "postgres" otherwise; `unavailable` means retry.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::cluster {

class PgConnection;

using Sha256 = std::array<unsigned char, 32>;

// The schema version this build writes and reads (migrations in schema.cpp, applied in order,
// each once, under a lock: any number of processes may open a store at once).
inline constexpr int kSchemaVersion = 2;

struct FleetSettings {
  std::uint32_t shard_count = 0;  // virtual shards (protocol::virtual_shard)
  double budget = 0;              // every user's capacity (the mirror's starting value)
};

struct EnrolledUser {
  std::uint64_t user_index = 0;  // the engine's global user id: enrolment order, never reused
  std::string device_id;
  std::uint32_t shard = 0;
  std::optional<Sha256> credential;  // empty: revoked
};

struct GatewayRow {
  std::string gateway_id;
  std::string address;           // where HAProxy sends its shards' devices ("host:port")
  bool alive = false;            // its lease is unexpired by the server's clock
  std::int64_t lease_token = 0;  // rises with every lease the gateway takes anew
};

struct ShardOwner {
  std::uint32_t shard = 0;
  std::string gateway_id;  // empty: nobody
  std::int64_t epoch = 0;  // rises with every move
};

struct ShardSnapshot {
  std::uint32_t shard = 0;
  std::string blob;         // mirror_blob.hpp
  std::string as_of_query;  // the last query folded in ("" before any)
};

struct QueryIntent {
  std::string query_id;
  std::int64_t coordinator_epoch = 0;
  std::string spec;                         // a serialized request, opaque here
  std::vector<double> round_worst_charges;  // per round sent: the most it can charge any user
  std::string state;                        // "running", "finished" or "aborted"
  std::string reason;                       // why it was aborted
};

struct StoredResult {
  std::string query_id;
  std::string result;  // a serialized cgp.v1.QueryResult
  bool degraded = false;
  std::vector<std::uint32_t> lost_shards;
};

class ClusterStore {
 public:
  // Connects and brings the schema to kSchemaVersion. A database whose schema is newer than
  // this build is refused (`invalid_argument`, "postgres"): an old binary never writes to it.
  static Expected<std::unique_ptr<ClusterStore>> open(const std::string& conninfo);
  ~ClusterStore();
  ClusterStore(const ClusterStore&) = delete;
  ClusterStore& operator=(const ClusterStore&) = delete;

  Expected<int> schema_version();
  PgConnection& connection() noexcept { return *db_; }

  // The fleet's settings, set once: a second call with the same values is a no-op, with others
  // `already_exists` (a fleet's shard count never changes: devices derive their shard from it).
  Status initialize(const FleetSettings& settings);
  // `invalid_argument` naming "cluster" before initialize.
  Expected<FleetSettings> settings();

  // Enrolment. A new device gets the next user index; a revoked one gets its credential back
  // and keeps its index; an enrolled one is `already_exists`. Ids: 1..128 bytes, no NUL.
  Expected<EnrolledUser> enrol(const std::string& device_id, const Sha256& credential);
  // Many at once, in the order given, in one transaction (all or none).
  Expected<std::vector<EnrolledUser>> enrol_all(
      std::span<const std::pair<std::string, Sha256>> devices);
  // `invalid_argument` naming "device_id" for an id never enrolled.
  Status revoke(const std::string& device_id);
  // Every device of these shards (revoked ones included: they keep their index), by index;
  // from_index on: those enrolled since the fleet had that many users.
  Expected<std::vector<EnrolledUser>> enrolled_in(std::span<const std::uint32_t> shards,
                                                  std::uint64_t from_index = 0);
  // The user indices of revoked devices, ascending.
  Expected<std::vector<std::uint32_t>> revoked_users();
  // One past the largest user index (the engine's fleet size).
  Expected<std::uint64_t> fleet_users();

  // Gateways authenticate with their own credentials (the digest is stored).
  Status register_gateway(const std::string& gateway_id, const Sha256& credential);
  Expected<std::optional<Sha256>> gateway_credential(const std::string& gateway_id);
  // Takes or renews the lease for `ttl` from the server's now. Returns the lease token: the
  // same while the lease stays unbroken, a new one after it lapsed (the gateway must then
  // reload its shards: it may have lost them). `invalid_argument` for an unregistered id.
  Expected<std::int64_t> renew_lease(const std::string& gateway_id, const std::string& address,
                                     std::chrono::milliseconds ttl);
  // Gives the lease up now (a clean stop): its shards can move at once.
  Status drop_lease(const std::string& gateway_id);
  Expected<std::vector<GatewayRow>> gateways();

  // Every shard's owner, by shard (shards never assigned are absent).
  Expected<std::vector<ShardOwner>> shard_owners();
  // Moves these shards to these gateways in one transaction, each moved shard's epoch + 1
  // (a shard already there keeps its epoch), fenced by the coordinator epoch (only the leader
  // moves shards: `stale_epoch` otherwise). Shards must be below the fleet's shard count and
  // gateways registered. Returns the new rows.
  Expected<std::vector<ShardOwner>> assign_shards(
      std::int64_t coordinator_epoch, std::span<const std::pair<std::uint32_t, std::string>> moves);

  // Coordinator leadership: the session-level advisory lock on this store's connection. On
  // taking it, the coordinator epoch rises and is returned; empty when another session holds
  // it. `still_leading` asks the server (one statement): false once the session that took the
  // lock is gone, even if nothing else noticed yet.
  Expected<std::optional<std::int64_t>> try_lead();
  bool still_leading();
  Expected<std::int64_t> coordinator_epoch();
  // The leader says where its control port and its Analyst API are (fenced by its epoch);
  // gateways and analysts read them to dial whoever leads now.
  Status announce_leader(std::int64_t epoch, const std::string& control_address,
                         const std::string& analyst_address);
  struct Leader {
    std::int64_t epoch = 0;
    std::string control_address;  // "" until a leader announced itself
    std::string analyst_address;
  };
  Expected<Leader> leader();

  // Query intents, fenced by the coordinator epoch: `stale_epoch` unless `epoch` is current.
  // `adaptive`: one of Alg. 3's queries (adaptive_queries counts them).
  Status begin_query(const std::string& query_id, std::int64_t epoch, const std::string& spec,
                     bool adaptive = false);
  // How many of Alg. 3's queries were ever begun (any state): the next one's l is this + 1.
  Expected<std::uint64_t> adaptive_queries();
  // Committed before round `round_worst_charges.size()` is broadcast: appends its worst case.
  Status round_sent(const std::string& query_id, std::int64_t epoch, double worst_charge);
  // The result and the intent's end in one transaction.
  Status finish_query(const std::string& query_id, std::int64_t epoch, const StoredResult& result);
  Status abort_query(const std::string& query_id, std::int64_t epoch, const std::string& reason);
  Expected<std::vector<QueryIntent>> running_queries();
  // One intent, whatever its state; empty for an id never begun.
  Expected<std::optional<QueryIntent>> intent(const std::string& query_id);
  Expected<std::optional<StoredResult>> result(const std::string& query_id);

  // A round's counters from one gateway (idempotent per (query, round, gateway)).
  struct RoundCounters {
    std::uint64_t asked = 0, answered = 0, refused = 0, unanswered = 0;
  };
  Status record_round(const std::string& query_id, std::uint32_t round,
                      const std::string& gateway_id, const RoundCounters& counters);

  // Mirror snapshots, written by the shard's owner under its epoch (one transaction for all:
  // `stale_epoch` if any shard moved), read by whoever takes a shard over. A snapshot is dated
  // by what it holds, not by when it was written: `as_of` when given (an Unsettled::as_of, for a
  // mirror made at load), else the start of its as_of_query's intent — every query the gateway
  // ran up to that one is in it, and none begun later (a gateway runs queries one at a time and
  // saves after each). A query id without an intent dates it at the beginning of time: every
  // query counts as unsettled (never optimistic).
  Status save_snapshots(const std::string& gateway_id,
                        std::span<const std::pair<ShardSnapshot, std::int64_t>> snapshots,
                        const std::string& as_of = {});
  Expected<std::vector<ShardSnapshot>> snapshots(std::span<const std::uint32_t> shards);
  // Per shard (in the order given): the worst case of every round of every query begun after
  // the shard's snapshot is dated, whatever the query's state — what the snapshot may not hold.
  // A shard without a snapshot was never served (a gateway saves one as it loads a shard):
  // nothing. The mirror a new owner may use is its snapshot less this; `as_of` dates that
  // mirror (save it with it). Read under a lock that holds new intents back, and dated by the
  // clock inside it: an intent begun (by the clock, at its insert) after `as_of` is one this
  // read did not see, and every one it saw began before.
  struct Unsettled {
    std::vector<double> charges;
    std::string as_of;  // a PostgreSQL timestamp
  };
  Expected<Unsettled> unsettled_charges(std::span<const std::uint32_t> shards);

 private:
  explicit ClusterStore(std::unique_ptr<PgConnection> db);
  Status migrate();
  std::unique_ptr<PgConnection> db_;
  std::uint64_t leading_session_ = 0;  // db_->sessions() when the lock was taken; 0: not leading
};

// "host:port" with a host of letters, digits, '.', '-' (or a bracketed IPv6 literal) and a port
// in 1..65535: what a gateway may advertise (it goes into HAProxy's configuration).
bool valid_host_port(std::string_view address);

// The error every fenced write returns when its epoch is not current.
Error stale_epoch(std::string_view what);

}  // namespace cgp::cluster

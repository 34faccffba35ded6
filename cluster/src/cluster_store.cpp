#include "cgp/cluster/cluster_store.hpp"

#include <algorithm>
#include <cstring>

#include "cgp/cluster/postgres.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "schema.hpp"

namespace cgp::cluster {

namespace {

// Advisory lock keys (one namespace per cluster database): "cgp" then a number.
constexpr std::int64_t kMigrationLock = 0x6367700001;
constexpr std::int64_t kLeaderLock = 0x6367700002;

Error store_error(ErrorCode code, const std::string& parameter, const std::string& message) {
  return make_error(code, parameter, message);
}

PgParam digest_param(const Sha256& digest) {
  return PgParam::bytes(std::string_view(reinterpret_cast<const char*>(digest.data()), 32));
}

Expected<std::optional<Sha256>> digest_of(const PgRows& rows, int row, int column) {
  if (rows.null(row, column)) return std::optional<Sha256>{};
  CGP_ASSIGN_OR_RETURN(const std::string bytes, rows.bytes(row, column));
  if (bytes.size() != 32)
    return store_error(ErrorCode::internal_error, "postgres", "postgres: a digest is not 32 bytes");
  Sha256 digest;
  std::memcpy(digest.data(), bytes.data(), 32);
  return std::optional<Sha256>(digest);
}

// A PostgreSQL array literal of integers or of quoted text.
template <class Integer>
std::string int_array(std::span<const Integer> values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out + "}";
}
std::string text_array(const std::vector<std::string>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += i ? ",\"" : "\"";
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

Expected<std::vector<double>> parse_float_array(const std::string& text) {
  std::vector<double> out;
  if (text.size() < 2 || text.front() != '{' || text.back() != '}')
    return store_error(ErrorCode::internal_error, "postgres", "postgres: not an array: " + text);
  const std::string body = text.substr(1, text.size() - 2);
  std::size_t at = 0;
  while (at < body.size()) {
    const std::size_t end = std::min(body.find(',', at), body.size());
    out.push_back(std::strtod(body.substr(at, end - at).c_str(), nullptr));
    at = end + 1;
  }
  return out;
}

Expected<std::vector<std::uint32_t>> parse_int_array(const std::string& text) {
  CGP_ASSIGN_OR_RETURN(const auto values, parse_float_array(text));
  std::vector<std::uint32_t> out;
  for (double v : values) out.push_back(static_cast<std::uint32_t>(v));
  return out;
}

}  // namespace

bool valid_host_port(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) return false;
  std::string_view host = address.substr(0, colon), port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535 || std::stoi(std::string(port)) == 0)
    return false;
  if (host.front() == '[') {  // an IPv6 literal
    return host.size() > 2 && host.back() == ']' &&
           host.substr(1, host.size() - 2).find_first_not_of("0123456789abcdefABCDEF:.") ==
               std::string_view::npos;
  }
  return host.size() <= 253 &&
         host.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") ==
             std::string_view::npos;
}

namespace {

Status check_id(const std::string& parameter, const std::string& id) {
  if (id.empty() || id.size() > 128 || id.find('\0') != std::string::npos)
    return store_error(ErrorCode::invalid_argument, parameter,
                       parameter + " must be 1 to 128 bytes without NUL, got " +
                           std::to_string(id.size()) + " bytes");
  return {};
}

}  // namespace

namespace {
Status require_epoch(PgConnection& db, std::int64_t epoch, std::string_view what);
}  // namespace

Error stale_epoch(std::string_view what) {
  return make_error(ErrorCode::invalid_argument, "epoch",
                    "stale epoch: " + std::string(what) +
                        " (a newer coordinator or owner holds it; this write changed nothing)");
}

ClusterStore::ClusterStore(std::unique_ptr<PgConnection> db) : db_(std::move(db)) {}
ClusterStore::~ClusterStore() = default;

Expected<std::unique_ptr<ClusterStore>> ClusterStore::open(const std::string& conninfo) {
  CGP_ASSIGN_OR_RETURN(auto db, PgConnection::connect(conninfo));
  std::unique_ptr<ClusterStore> store(new ClusterStore(std::move(db)));
  CGP_RETURN_IF_ERROR(store->migrate());
  return store;
}

Status ClusterStore::migrate() {
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(
        db_->run("SELECT pg_advisory_xact_lock($1)", {PgParam::integer(kMigrationLock)}));
    CGP_RETURN_IF_ERROR(
        db_->run("CREATE TABLE IF NOT EXISTS cgp_schema (version integer PRIMARY KEY, applied_at "
                 "timestamptz NOT NULL DEFAULT now())"));
    CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT coalesce(max(version), 0) FROM cgp_schema"));
    CGP_ASSIGN_OR_RETURN(const std::int64_t version, rows.integer(0, 0));
    const auto steps = detail::migrations();
    if (version > static_cast<std::int64_t>(steps.size()))
      return store_error(ErrorCode::invalid_argument, "postgres",
                         "postgres: the cluster's schema is version " + std::to_string(version) +
                             ", newer than this build's " + std::to_string(steps.size()) +
                             ": upgrade cgpkit before using it");
    for (std::size_t v = static_cast<std::size_t>(version); v < steps.size(); ++v) {
      CGP_RETURN_IF_ERROR(db_->script(steps[v]));
      CGP_RETURN_IF_ERROR(db_->run("INSERT INTO cgp_schema (version) VALUES ($1)",
                                   {PgParam::integer(static_cast<std::int64_t>(v + 1))}));
    }
    return {};
  });
}

Expected<int> ClusterStore::schema_version() {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT coalesce(max(version), 0) FROM cgp_schema"));
  CGP_ASSIGN_OR_RETURN(const std::int64_t version, rows.integer(0, 0));
  return static_cast<int>(version);
}

Status ClusterStore::initialize(const FleetSettings& settings) {
  if (settings.shard_count < 1 || settings.shard_count > protocol::kMaxVirtualShards)
    return store_error(ErrorCode::out_of_range, "shard_count",
                       "shard_count must be in [1, " + std::to_string(protocol::kMaxVirtualShards) +
                           "], got " + std::to_string(settings.shard_count));
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", settings.budget));
  CGP_RETURN_IF_ERROR(
      db_->run("INSERT INTO cgp_fleet (shard_count, budget) VALUES ($1, $2) ON CONFLICT DO NOTHING",
               {PgParam::integer(settings.shard_count), PgParam::real(settings.budget)}));
  CGP_ASSIGN_OR_RETURN(const FleetSettings stored, this->settings());
  if (stored.shard_count != settings.shard_count || stored.budget != settings.budget)
    return store_error(ErrorCode::already_exists, "cluster",
                       "the cluster is already set up with " + std::to_string(stored.shard_count) +
                           " shards and budget " + std::to_string(stored.budget) +
                           "; a fleet's settings never change");
  return {};
}

Expected<FleetSettings> ClusterStore::settings() {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT shard_count, budget FROM cgp_fleet"));
  if (rows.size() == 0)
    return store_error(ErrorCode::invalid_argument, "cluster",
                       "the cluster is not set up yet (cgp-coordinator cluster init)");
  CGP_ASSIGN_OR_RETURN(const std::int64_t shards, rows.integer(0, 0));
  CGP_ASSIGN_OR_RETURN(const double budget, rows.real(0, 1));
  return FleetSettings{static_cast<std::uint32_t>(shards), budget};
}

Expected<EnrolledUser> ClusterStore::enrol(const std::string& device_id, const Sha256& credential) {
  const std::pair<std::string, Sha256> one{device_id, credential};
  CGP_ASSIGN_OR_RETURN(auto users, enrol_all(std::span(&one, 1)));
  return users.front();
}

Expected<std::vector<EnrolledUser>> ClusterStore::enrol_all(
    std::span<const std::pair<std::string, Sha256>> devices) {
  for (const auto& [device_id, credential] : devices) {
    CGP_RETURN_IF_ERROR(check_id("device_id", device_id));
    // The id a device says in Hello: the wire's id bytes only.
    for (unsigned char c : device_id)
      if (!wire::is_id_char(c))
        return store_error(
            ErrorCode::invalid_argument, "device_id",
            "device_id may hold only A-Z a-z 0-9 . _ - : @ / +, got \"" + device_id + "\"");
  }
  CGP_ASSIGN_OR_RETURN(const FleetSettings fleet, settings());
  std::vector<EnrolledUser> users;
  const Status enrolled = db_->transaction([&]() -> Status {
    users.clear();
    // Enrolments one at a time: indices are handed out densely, in order.
    CGP_RETURN_IF_ERROR(db_->run("LOCK TABLE cgp_devices IN SHARE ROW EXCLUSIVE MODE"));
    for (const auto& [device_id, credential] : devices) {
      EnrolledUser user{0, device_id, protocol::virtual_shard(device_id, fleet.shard_count),
                        credential};
      CGP_ASSIGN_OR_RETURN(auto found, db_->run("SELECT user_index, credential_sha256 IS NULL FROM "
                                                "cgp_devices WHERE device_id = $1",
                                                {PgParam::text(device_id)}));
      if (found.size() > 0) {
        CGP_ASSIGN_OR_RETURN(const bool revoked, found.boolean(0, 1));
        if (!revoked)
          return store_error(ErrorCode::already_exists, "device_id",
                             "device_id \"" + device_id + "\" is already enrolled");
        CGP_ASSIGN_OR_RETURN(const std::int64_t index, found.integer(0, 0));
        user.user_index = static_cast<std::uint64_t>(index);
        CGP_RETURN_IF_ERROR(
            db_->run("UPDATE cgp_devices SET credential_sha256 = $2 WHERE device_id = $1",
                     {PgParam::text(device_id), digest_param(credential)}));
      } else {
        CGP_ASSIGN_OR_RETURN(
            auto inserted,
            db_->run("INSERT INTO cgp_devices (user_index, device_id, shard, credential_sha256) "
                     "SELECT coalesce(max(user_index) + 1, 0), $1, $2, $3 FROM cgp_devices "
                     "RETURNING user_index",
                     {PgParam::text(device_id), PgParam::integer(user.shard),
                      digest_param(credential)}));
        CGP_ASSIGN_OR_RETURN(const std::int64_t index, inserted.integer(0, 0));
        user.user_index = static_cast<std::uint64_t>(index);
      }
      users.push_back(std::move(user));
    }
    return {};
  });
  if (!enrolled) return enrolled.error();
  return users;
}

Status ClusterStore::revoke(const std::string& device_id) {
  CGP_ASSIGN_OR_RETURN(
      auto rows, db_->run("UPDATE cgp_devices SET credential_sha256 = NULL WHERE device_id = $1",
                          {PgParam::text(device_id)}));
  if (rows.affected() == 0)
    return store_error(ErrorCode::invalid_argument, "device_id",
                       "device_id \"" + device_id + "\" is not enrolled");
  return {};
}

Expected<std::vector<EnrolledUser>> ClusterStore::enrolled_in(std::span<const std::uint32_t> shards,
                                                              std::uint64_t from_index) {
  CGP_ASSIGN_OR_RETURN(
      auto rows,
      db_->run("SELECT user_index, device_id, shard, credential_sha256 FROM cgp_devices "
               "WHERE shard = ANY($1::integer[]) AND user_index >= $2::bigint ORDER BY user_index",
               {PgParam::text(int_array(shards)), PgParam::text(std::to_string(from_index))},
               /*binary_rows=*/true));
  std::vector<EnrolledUser> users;
  users.reserve(static_cast<std::size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t index, rows.integer(r, 0));
    CGP_ASSIGN_OR_RETURN(const std::int64_t shard, rows.integer(r, 2));
    CGP_ASSIGN_OR_RETURN(auto digest, digest_of(rows, r, 3));
    users.push_back({static_cast<std::uint64_t>(index), rows.text(r, 1),
                     static_cast<std::uint32_t>(shard), digest});
  }
  return users;
}

Expected<std::vector<std::uint32_t>> ClusterStore::revoked_users() {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT user_index FROM cgp_devices WHERE "
                                           "credential_sha256 IS NULL ORDER BY user_index"));
  std::vector<std::uint32_t> out;
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t user, rows.integer(r, 0));
    out.push_back(static_cast<std::uint32_t>(user));
  }
  return out;
}

Expected<std::uint64_t> ClusterStore::fleet_users() {
  CGP_ASSIGN_OR_RETURN(auto rows,
                       db_->run("SELECT coalesce(max(user_index) + 1, 0) FROM cgp_devices"));
  CGP_ASSIGN_OR_RETURN(const std::int64_t users, rows.integer(0, 0));
  return static_cast<std::uint64_t>(users);
}

Status ClusterStore::register_gateway(const std::string& gateway_id, const Sha256& credential) {
  CGP_RETURN_IF_ERROR(check_id("gateway_id", gateway_id));
  CGP_RETURN_IF_ERROR(db_->run(
      "INSERT INTO cgp_gateways (gateway_id, credential_sha256) VALUES ($1, $2) "
      "ON CONFLICT (gateway_id) DO UPDATE SET credential_sha256 = EXCLUDED.credential_sha256",
      {PgParam::text(gateway_id), digest_param(credential)}));
  return {};
}

Expected<std::optional<Sha256>> ClusterStore::gateway_credential(const std::string& gateway_id) {
  CGP_ASSIGN_OR_RETURN(auto rows,
                       db_->run("SELECT credential_sha256 FROM cgp_gateways WHERE gateway_id = $1",
                                {PgParam::text(gateway_id)}, /*binary_rows=*/true));
  if (rows.size() == 0) return std::optional<Sha256>{};
  return digest_of(rows, 0, 0);
}

Expected<std::int64_t> ClusterStore::renew_lease(const std::string& gateway_id,
                                                 const std::string& address,
                                                 std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0)
    return store_error(ErrorCode::not_positive, "lease_ttl", "lease_ttl must be positive");
  // The address goes into HAProxy's configuration: host:port and nothing else.
  if (!valid_host_port(address))
    return store_error(
        ErrorCode::invalid_argument, "address",
        "address must be host:port (a name, an IPv4 or a [IPv6] literal), got \"" + address + "\"");
  // SET sees the row as it was: the token rises only when the old lease had lapsed.
  CGP_ASSIGN_OR_RETURN(
      auto rows,
      db_->run("UPDATE cgp_gateways SET address = $2, lease_token = CASE WHEN lease_expires > "
               "clock_timestamp() THEN lease_token ELSE lease_token + 1 END, lease_expires = "
               "clock_timestamp() + $3 * interval '1 millisecond' WHERE gateway_id = $1 "
               "RETURNING lease_token",
               {PgParam::text(gateway_id), PgParam::text(address), PgParam::integer(ttl.count())}));
  if (rows.size() == 0)
    return store_error(ErrorCode::invalid_argument, "gateway_id",
                       "gateway_id \"" + gateway_id + "\" is not registered");
  return rows.integer(0, 0);
}

Status ClusterStore::drop_lease(const std::string& gateway_id) {
  CGP_RETURN_IF_ERROR(db_->run("UPDATE cgp_gateways SET lease_expires = NULL WHERE gateway_id = $1",
                               {PgParam::text(gateway_id)}));
  return {};
}

Expected<std::vector<GatewayRow>> ClusterStore::gateways() {
  CGP_ASSIGN_OR_RETURN(
      auto rows,
      db_->run("SELECT gateway_id, address, coalesce(lease_expires > clock_timestamp(), false), "
               "lease_token FROM cgp_gateways ORDER BY gateway_id"));
  std::vector<GatewayRow> out;
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const bool alive, rows.boolean(r, 2));
    CGP_ASSIGN_OR_RETURN(const std::int64_t token, rows.integer(r, 3));
    out.push_back({rows.text(r, 0), rows.text(r, 1), alive, token});
  }
  return out;
}

Expected<std::vector<ShardOwner>> ClusterStore::shard_owners() {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT shard, coalesce(gateway_id, ''), epoch FROM "
                                           "cgp_shard_owners ORDER BY shard"));
  std::vector<ShardOwner> out;
  out.reserve(static_cast<std::size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t shard, rows.integer(r, 0));
    CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, rows.integer(r, 2));
    out.push_back({static_cast<std::uint32_t>(shard), rows.text(r, 1), epoch});
  }
  return out;
}

Expected<std::vector<ShardOwner>> ClusterStore::assign_shards(
    std::int64_t coordinator_epoch, std::span<const std::pair<std::uint32_t, std::string>> moves) {
  CGP_ASSIGN_OR_RETURN(const FleetSettings fleet, settings());
  std::vector<std::uint32_t> shards;
  std::vector<std::string> owners;
  for (const auto& [shard, gateway] : moves) {
    if (shard >= fleet.shard_count)
      return store_error(ErrorCode::out_of_range, "shard",
                         "shard " + std::to_string(shard) + " is not below the fleet's " +
                             std::to_string(fleet.shard_count));
    if (std::find(shards.begin(), shards.end(), shard) != shards.end())
      return store_error(ErrorCode::invalid_argument, "shard",
                         "shard " + std::to_string(shard) + " is moved twice in one call");
    shards.push_back(shard);
    owners.push_back(gateway);
  }
  const std::string shard_list = int_array(std::span<const std::uint32_t>(shards));
  const Status moved = db_->transaction([&]() -> Status {
    // Only the leader moves shards: held against a new leader until the moves are in.
    CGP_RETURN_IF_ERROR(require_epoch(*db_, coordinator_epoch, "assign_shards"));
    CGP_RETURN_IF_ERROR(
        db_->run("INSERT INTO cgp_shard_owners (shard, gateway_id, epoch) SELECT s, g, 1 FROM "
                 "unnest($1::integer[], $2::text[]) AS m(s, g) ON CONFLICT (shard) DO UPDATE SET "
                 "gateway_id = EXCLUDED.gateway_id, epoch = cgp_shard_owners.epoch + 1 WHERE "
                 "cgp_shard_owners.gateway_id IS DISTINCT FROM EXCLUDED.gateway_id",
                 {PgParam::text(shard_list), PgParam::text(text_array(owners))}));
    return {};
  });
  if (!moved) return moved.error();
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT shard, gateway_id, epoch FROM cgp_shard_owners "
                                           "WHERE shard = ANY($1::integer[]) ORDER BY shard",
                                           {PgParam::text(shard_list)}));
  std::vector<ShardOwner> out;
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t shard, rows.integer(r, 0));
    CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, rows.integer(r, 2));
    out.push_back({static_cast<std::uint32_t>(shard), rows.text(r, 1), epoch});
  }
  return out;
}

Expected<std::optional<std::int64_t>> ClusterStore::try_lead() {
  if (leading_session_ != 0 && db_->healthy() && db_->sessions() == leading_session_) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, coordinator_epoch());
    return std::optional<std::int64_t>(epoch);
  }
  leading_session_ = 0;
  CGP_ASSIGN_OR_RETURN(
      auto locked, db_->run("SELECT pg_try_advisory_lock($1)", {PgParam::integer(kLeaderLock)}));
  CGP_ASSIGN_OR_RETURN(const bool taken, locked.boolean(0, 0));
  if (!taken) return std::optional<std::int64_t>{};
  auto bumped = db_->run(
      "UPDATE cgp_fleet SET coordinator_epoch = coordinator_epoch + 1 RETURNING coordinator_epoch");
  if (!bumped || bumped->size() == 0) {
    (void)db_->run("SELECT pg_advisory_unlock($1)", {PgParam::integer(kLeaderLock)});
    if (!bumped) return bumped.error();
    return store_error(ErrorCode::invalid_argument, "cluster",
                       "the cluster is not set up yet (cgp-coordinator cluster init)");
  }
  leading_session_ = db_->sessions();
  CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, bumped->integer(0, 0));
  return std::optional<std::int64_t>(epoch);
}

bool ClusterStore::still_leading() {
  if (leading_session_ == 0) return false;
  // One statement: a session the server ended is noticed here, not at the next write.
  if (!db_->run("SELECT 1")) return false;
  return db_->sessions() == leading_session_;
}

Expected<std::int64_t> ClusterStore::coordinator_epoch() {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT coordinator_epoch FROM cgp_fleet"));
  if (rows.size() == 0)
    return store_error(ErrorCode::invalid_argument, "cluster", "the cluster is not set up yet");
  return rows.integer(0, 0);
}

namespace {
// Inside a transaction: holds the fleet row against a new leader until the transaction ends.
Status require_epoch(PgConnection& db, std::int64_t epoch, std::string_view what) {
  CGP_ASSIGN_OR_RETURN(auto rows, db.run("SELECT coordinator_epoch FROM cgp_fleet FOR SHARE"));
  if (rows.size() == 0) return stale_epoch(what);
  CGP_ASSIGN_OR_RETURN(const std::int64_t current, rows.integer(0, 0));
  if (current != epoch) return stale_epoch(what);
  return {};
}
}  // namespace

Status ClusterStore::announce_leader(std::int64_t epoch, const std::string& control_address,
                                     const std::string& analyst_address) {
  if (!valid_host_port(control_address))
    return store_error(ErrorCode::invalid_argument, "control_address",
                       "control_address must be host:port");
  if (!valid_host_port(analyst_address))
    return store_error(ErrorCode::invalid_argument, "analyst_address",
                       "analyst_address must be host:port");
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(require_epoch(*db_, epoch, "announce_leader"));
    CGP_RETURN_IF_ERROR(db_->run("UPDATE cgp_fleet SET leader_control = $1, leader_analyst = $2",
                                 {PgParam::text(control_address), PgParam::text(analyst_address)}));
    return {};
  });
}

Expected<ClusterStore::Leader> ClusterStore::leader() {
  CGP_ASSIGN_OR_RETURN(
      auto rows,
      db_->run("SELECT coordinator_epoch, leader_control, leader_analyst FROM cgp_fleet"));
  if (rows.size() == 0)
    return store_error(ErrorCode::invalid_argument, "cluster", "the cluster is not set up yet");
  CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, rows.integer(0, 0));
  return Leader{epoch, rows.text(0, 1), rows.text(0, 2)};
}

Status ClusterStore::begin_query(const std::string& query_id, std::int64_t epoch,
                                 const std::string& spec, bool adaptive) {
  CGP_RETURN_IF_ERROR(check_id("query_id", query_id));
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(require_epoch(*db_, epoch, "begin_query " + query_id));
    CGP_ASSIGN_OR_RETURN(auto inserted,
                         db_->run("INSERT INTO cgp_query_intents (query_id, coordinator_epoch, "
                                  "spec, adaptive) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                                  {PgParam::text(query_id), PgParam::integer(epoch),
                                   PgParam::bytes(spec), PgParam::boolean(adaptive)}));
    if (inserted.affected() == 0)
      return store_error(ErrorCode::already_exists, "query_id",
                         "query_id \"" + query_id + "\" was already used");
    return {};
  });
}

Expected<std::uint64_t> ClusterStore::adaptive_queries() {
  CGP_ASSIGN_OR_RETURN(auto rows,
                       db_->run("SELECT count(*) FROM cgp_query_intents WHERE adaptive"));
  CGP_ASSIGN_OR_RETURN(const std::int64_t count, rows.integer(0, 0));
  return static_cast<std::uint64_t>(count);
}

Status ClusterStore::round_sent(const std::string& query_id, std::int64_t epoch,
                                double worst_charge) {
  CGP_RETURN_IF_ERROR(require_finite_positive("worst_charge", worst_charge));
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(require_epoch(*db_, epoch, "round_sent " + query_id));
    CGP_ASSIGN_OR_RETURN(auto rows,
                         db_->run("UPDATE cgp_query_intents SET round_worst_charges = "
                                  "array_append(round_worst_charges, $2::double precision) WHERE "
                                  "query_id = $1 AND state = 'running'",
                                  {PgParam::text(query_id), PgParam::real(worst_charge)}));
    if (rows.affected() == 0)
      return store_error(ErrorCode::invalid_argument, "query_id",
                         "query_id \"" + query_id + "\" is not running");
    return {};
  });
}

Status ClusterStore::finish_query(const std::string& query_id, std::int64_t epoch,
                                  const StoredResult& result) {
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(require_epoch(*db_, epoch, "finish_query " + query_id));
    CGP_ASSIGN_OR_RETURN(
        auto ended, db_->run("UPDATE cgp_query_intents SET state = 'finished', ended_at = now() "
                             "WHERE query_id = $1 AND state = 'running'",
                             {PgParam::text(query_id)}));
    if (ended.affected() == 0)
      return store_error(ErrorCode::invalid_argument, "query_id",
                         "query_id \"" + query_id + "\" is not running");
    CGP_RETURN_IF_ERROR(db_->run(
        "INSERT INTO cgp_results (query_id, result, degraded, lost_shards) VALUES ($1, $2, $3, "
        "$4::integer[])",
        {PgParam::text(query_id), PgParam::bytes(result.result), PgParam::boolean(result.degraded),
         PgParam::text(int_array(std::span<const std::uint32_t>(result.lost_shards)))}));
    return {};
  });
}

Status ClusterStore::abort_query(const std::string& query_id, std::int64_t epoch,
                                 const std::string& reason) {
  return db_->transaction([&]() -> Status {
    CGP_RETURN_IF_ERROR(require_epoch(*db_, epoch, "abort_query " + query_id));
    CGP_ASSIGN_OR_RETURN(auto ended,
                         db_->run("UPDATE cgp_query_intents SET state = 'aborted', reason = $2, "
                                  "ended_at = now() WHERE query_id = $1 AND state = 'running'",
                                  {PgParam::text(query_id), PgParam::text(reason)}));
    if (ended.affected() == 0)
      return store_error(ErrorCode::invalid_argument, "query_id",
                         "query_id \"" + query_id + "\" is not running");
    return {};
  });
}

Expected<std::vector<QueryIntent>> ClusterStore::running_queries() {
  CGP_ASSIGN_OR_RETURN(
      auto rows, db_->run("SELECT query_id, coordinator_epoch, spec, round_worst_charges::text, "
                          "state FROM cgp_query_intents WHERE state = 'running' ORDER BY "
                          "started_at, query_id"));
  std::vector<QueryIntent> out;
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, rows.integer(r, 1));
    CGP_ASSIGN_OR_RETURN(std::string spec, rows.bytes(r, 2));
    CGP_ASSIGN_OR_RETURN(auto charges, parse_float_array(rows.text(r, 3)));
    out.push_back(
        {rows.text(r, 0), epoch, std::move(spec), std::move(charges), rows.text(r, 4), {}});
  }
  return out;
}

Expected<std::optional<QueryIntent>> ClusterStore::intent(const std::string& query_id) {
  CGP_ASSIGN_OR_RETURN(
      auto rows, db_->run("SELECT query_id, coordinator_epoch, spec, round_worst_charges::text, "
                          "state, reason FROM cgp_query_intents WHERE query_id = $1",
                          {PgParam::text(query_id)}));
  if (rows.size() == 0) return std::optional<QueryIntent>{};
  CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, rows.integer(0, 1));
  CGP_ASSIGN_OR_RETURN(std::string spec, rows.bytes(0, 2));
  CGP_ASSIGN_OR_RETURN(auto charges, parse_float_array(rows.text(0, 3)));
  return std::optional<QueryIntent>(QueryIntent{rows.text(0, 0), epoch, std::move(spec),
                                                std::move(charges), rows.text(0, 4),
                                                rows.text(0, 5)});
}

Expected<std::optional<StoredResult>> ClusterStore::result(const std::string& query_id) {
  CGP_ASSIGN_OR_RETURN(auto rows, db_->run("SELECT result, degraded, lost_shards::text FROM "
                                           "cgp_results WHERE query_id = $1",
                                           {PgParam::text(query_id)}));
  if (rows.size() == 0) return std::optional<StoredResult>{};
  CGP_ASSIGN_OR_RETURN(std::string bytes, rows.bytes(0, 0));
  CGP_ASSIGN_OR_RETURN(const bool degraded, rows.boolean(0, 1));
  CGP_ASSIGN_OR_RETURN(auto lost, parse_int_array(rows.text(0, 2)));
  return std::optional<StoredResult>(
      StoredResult{query_id, std::move(bytes), degraded, std::move(lost)});
}

Status ClusterStore::record_round(const std::string& query_id, std::uint32_t round,
                                  const std::string& gateway_id, const RoundCounters& counters) {
  const auto n = [](std::uint64_t v) { return PgParam::integer(static_cast<std::int64_t>(v)); };
  CGP_RETURN_IF_ERROR(db_->run(
      "INSERT INTO cgp_round_counters (query_id, round, gateway_id, asked, answered, refused, "
      "unanswered) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
      {PgParam::text(query_id), PgParam::integer(round), PgParam::text(gateway_id),
       n(counters.asked), n(counters.answered), n(counters.refused), n(counters.unanswered)}));
  return {};
}

Status ClusterStore::save_snapshots(
    const std::string& gateway_id,
    std::span<const std::pair<ShardSnapshot, std::int64_t>> snapshots, const std::string& as_of) {
  std::vector<std::uint32_t> shards;
  for (const auto& [snapshot, epoch] : snapshots) shards.push_back(snapshot.shard);
  return db_->transaction([&]() -> Status {
    CGP_ASSIGN_OR_RETURN(
        auto owners, db_->run("SELECT shard, coalesce(gateway_id, ''), epoch FROM "
                              "cgp_shard_owners WHERE shard = ANY($1::integer[]) FOR SHARE",
                              {PgParam::text(int_array(std::span<const std::uint32_t>(shards)))}));
    std::vector<ShardOwner> held;
    for (int r = 0; r < owners.size(); ++r) {
      CGP_ASSIGN_OR_RETURN(const std::int64_t shard, owners.integer(r, 0));
      CGP_ASSIGN_OR_RETURN(const std::int64_t epoch, owners.integer(r, 2));
      held.push_back({static_cast<std::uint32_t>(shard), owners.text(r, 1), epoch});
    }
    for (const auto& [snapshot, epoch] : snapshots) {
      const auto owner = std::find_if(
          held.begin(), held.end(), [&](const ShardOwner& o) { return o.shard == snapshot.shard; });
      if (owner == held.end() || owner->gateway_id != gateway_id || owner->epoch != epoch)
        return stale_epoch("mirror snapshot of shard " + std::to_string(snapshot.shard) + " by " +
                           gateway_id);
      // Dated by what it holds (see the header): the load's clock, or its query's start.
      CGP_RETURN_IF_ERROR(db_->run(
          "INSERT INTO cgp_mirror_snapshots (shard, as_of_query, blob, saved_at) VALUES ($1, $2, "
          "$3, CASE WHEN $4 <> '' THEN $4::timestamptz ELSE coalesce((SELECT started_at FROM "
          "cgp_query_intents WHERE query_id = $2), '-infinity'::timestamptz) END) ON CONFLICT "
          "(shard) DO UPDATE SET as_of_query = EXCLUDED.as_of_query, blob = EXCLUDED.blob, "
          "saved_at = EXCLUDED.saved_at",
          {PgParam::integer(snapshot.shard), PgParam::text(snapshot.as_of_query),
           PgParam::bytes(snapshot.blob), PgParam::text(as_of)}));
    }
    return {};
  });
}

Expected<std::vector<ShardSnapshot>> ClusterStore::snapshots(
    std::span<const std::uint32_t> shards) {
  CGP_ASSIGN_OR_RETURN(
      auto rows, db_->run("SELECT shard, as_of_query, blob FROM cgp_mirror_snapshots WHERE shard = "
                          "ANY($1::integer[]) ORDER BY shard",
                          {PgParam::text(int_array(shards))}, /*binary_rows=*/true));
  std::vector<ShardSnapshot> out;
  for (int r = 0; r < rows.size(); ++r) {
    CGP_ASSIGN_OR_RETURN(const std::int64_t shard, rows.integer(r, 0));
    CGP_ASSIGN_OR_RETURN(std::string blob, rows.bytes(r, 2));
    out.push_back({static_cast<std::uint32_t>(shard), std::move(blob), rows.text(r, 1)});
  }
  return out;
}

Expected<ClusterStore::Unsettled> ClusterStore::unsettled_charges(
    std::span<const std::uint32_t> shards) {
  Unsettled out;
  const Status read = db_->transaction([&]() -> Status {
    // No intent is inserted while this reads (an insert waits for the lock, and its start is
    // the clock after it): every intent begun before `as_of` is seen here.
    CGP_RETURN_IF_ERROR(db_->run("LOCK TABLE cgp_query_intents IN SHARE MODE"));
    CGP_ASSIGN_OR_RETURN(auto now, db_->run("SELECT clock_timestamp()::text"));
    out.as_of = now.text(0, 0);
    CGP_ASSIGN_OR_RETURN(
        auto rows,
        db_->run("SELECT coalesce((SELECT sum(c) FROM cgp_query_intents i, "
                 "unnest(i.round_worst_charges) AS c WHERE i.started_at > m.saved_at), 0) FROM "
                 "unnest($1::integer[]) WITH ORDINALITY AS s(shard, place) LEFT JOIN "
                 "cgp_mirror_snapshots m ON m.shard = s.shard ORDER BY s.place",
                 {PgParam::text(int_array(shards))}));
    out.charges.clear();
    for (int r = 0; r < rows.size(); ++r) {
      CGP_ASSIGN_OR_RETURN(const double charge, rows.real(r, 0));
      out.charges.push_back(charge);
    }
    return {};
  });
  if (!read) return read.error();
  return out;
}

}  // namespace cgp::cluster

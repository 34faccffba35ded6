#include "schema.hpp"

#include <array>

namespace cgp::cluster::detail {

namespace {

// Version 1. The mirror is one blob per shard (mirror_blob.hpp): 10^7 users' mirror is 64
// blobs written in about a second, where per-user rows are ~40x slower (issue 30).
constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE cgp_fleet (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  shard_count integer NOT NULL CHECK (shard_count BETWEEN 1 AND 1048576),
  budget double precision NOT NULL CHECK (budget > 0 AND budget < 'Infinity'),
  coordinator_epoch bigint NOT NULL DEFAULT 0);
CREATE TABLE cgp_devices (
  user_index bigint PRIMARY KEY CHECK (user_index >= 0),
  device_id text NOT NULL UNIQUE CHECK (octet_length(device_id) BETWEEN 1 AND 128),
  shard integer NOT NULL CHECK (shard >= 0),
  credential_sha256 bytea CHECK (credential_sha256 IS NULL OR octet_length(credential_sha256) = 32));
CREATE INDEX cgp_devices_by_shard ON cgp_devices (shard, user_index);
CREATE TABLE cgp_gateways (
  gateway_id text PRIMARY KEY CHECK (octet_length(gateway_id) BETWEEN 1 AND 128),
  credential_sha256 bytea NOT NULL CHECK (octet_length(credential_sha256) = 32),
  address text NOT NULL DEFAULT '',
  lease_expires timestamptz,
  lease_token bigint NOT NULL DEFAULT 0);
CREATE TABLE cgp_shard_owners (
  shard integer PRIMARY KEY CHECK (shard >= 0),
  gateway_id text REFERENCES cgp_gateways (gateway_id),
  epoch bigint NOT NULL);
CREATE TABLE cgp_mirror_snapshots (
  shard integer PRIMARY KEY CHECK (shard >= 0),
  as_of_query text NOT NULL,
  blob bytea NOT NULL,
  saved_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE cgp_query_intents (
  query_id text PRIMARY KEY,
  coordinator_epoch bigint NOT NULL,
  spec bytea NOT NULL,
  round_worst_charges double precision[] NOT NULL DEFAULT '{}',
  state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished', 'aborted')),
  reason text NOT NULL DEFAULT '',
  started_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz);
CREATE TABLE cgp_results (
  query_id text PRIMARY KEY REFERENCES cgp_query_intents (query_id),
  result bytea NOT NULL,
  degraded boolean NOT NULL,
  lost_shards integer[] NOT NULL DEFAULT '{}',
  finished_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE cgp_round_counters (
  query_id text NOT NULL REFERENCES cgp_query_intents (query_id),
  round integer NOT NULL CHECK (round >= 0),
  gateway_id text NOT NULL,
  asked bigint NOT NULL, answered bigint NOT NULL, refused bigint NOT NULL,
  unanswered bigint NOT NULL,
  PRIMARY KEY (query_id, round, gateway_id));
)sql";

// Version 2: the round driver. The leader's control and analyst addresses (gateways and
// analysts dial whoever leads); an intent's start by the clock at its insert (snapshots are
// dated against it: ClusterStore::unsettled_charges); and
// whether an intent is one of Alg. 3's queries (its number l survives a new leader).
constexpr std::string_view kVersion2 = R"sql(
ALTER TABLE cgp_fleet ADD COLUMN leader_control text NOT NULL DEFAULT '';
ALTER TABLE cgp_fleet ADD COLUMN leader_analyst text NOT NULL DEFAULT '';
ALTER TABLE cgp_query_intents ADD COLUMN adaptive boolean NOT NULL DEFAULT false;
ALTER TABLE cgp_query_intents ALTER COLUMN started_at SET DEFAULT clock_timestamp();
CREATE INDEX cgp_query_intents_by_start ON cgp_query_intents (started_at);
)sql";

constexpr std::array<std::string_view, 2> kMigrations{kVersion1, kVersion2};

}  // namespace

std::span<const std::string_view> migrations() {
  return kMigrations;
}

}  // namespace cgp::cluster::detail

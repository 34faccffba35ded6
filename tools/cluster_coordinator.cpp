#include "cluster_coordinator.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/haproxy.hpp"
#include "cgp/common/files.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cgp/protocol/status_codec.hpp"
#include "cgp/transport/cluster_analyst.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/transport/metrics_endpoint.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::tools {

namespace {

using protocol::log_value;

// The host of "host:port" ("[v6]:port" keeps its brackets).
std::string host_of(const std::string& address) {
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// What gateways or analysts dial: `advertise` when given, else the listening address's host with
// the port it got (port 0 picks one).
std::string advertised_address(const std::string& listen, const std::string& advertise, int port) {
  if (!advertise.empty()) return advertise;
  return host_of(listen) + ":" + std::to_string(port);
}

// `text` in place of `path` at once (a reader sees the old file or the new one, never part).
Status replace_file(const std::string& path, std::string_view parameter, const std::string& text) {
  const std::string temporary = path + ".new";
  CGP_RETURN_IF_ERROR(write_private_file(temporary, parameter, text, /*overwrite=*/true));
  if (::rename(temporary.c_str(), path.c_str()) != 0)
    return make_error(ErrorCode::invalid_argument, std::string(parameter),
                      std::string(parameter) + ": cannot replace " + path);
  return {};
}

// An abort's error as an intent keeps it: "<code number> <parameter>\n<message>".
std::string encode_abort(const Error& error) {
  return std::to_string(static_cast<int>(error.code)) + " " + error.parameter + "\n" +
         error.message;
}

// The error an intent's reason says (a reason of another form: `unavailable`, its text).
Error decode_abort(const std::string& reason, const std::string& query_id) {
  Error out{ErrorCode::unavailable, "query_id",
            "query_id: " + query_id + " was aborted: " + reason};
  const auto line = reason.find('\n');
  const auto space = reason.find(' ');
  if (line == std::string::npos || space == std::string::npos || space > line) return out;
  int code = 0;
  try {
    code = std::stoi(reason.substr(0, space));
  } catch (...) {
    return out;
  }
  if (code <= 0 || code > static_cast<int>(kLastErrorCode)) return out;
  out.code = static_cast<ErrorCode>(code);
  out.parameter = reason.substr(space + 1, line - space - 1);
  out.message = "query " + query_id + " was aborted: " + reason.substr(line + 1);
  return out;
}

// The journal of the round driver: the cluster's PostgreSQL, every write fenced by the epoch
// this process leads under. The store's connection is shared with the leader's own checks.
class StoreJournal final : public transport::QueryJournal {
 public:
  StoreJournal(cluster::ClusterStore& store, std::mutex& mutex, std::int64_t epoch)
      : store_(store), mutex_(mutex), epoch_(epoch) {}

  Expected<Fleet> fleet() override {
    std::lock_guard lock(mutex_);
    Fleet out;
    CGP_ASSIGN_OR_RETURN(const auto settings, store_.settings());
    out.rho_capacity = settings.budget;
    out.shard_count = settings.shard_count;
    CGP_ASSIGN_OR_RETURN(out.users, store_.fleet_users());
    CGP_ASSIGN_OR_RETURN(out.revoked, store_.revoked_users());
    CGP_ASSIGN_OR_RETURN(const auto owners, store_.shard_owners());
    for (const auto& owner : owners)
      if (!owner.gateway_id.empty()) out.owners[owner.shard] = {owner.gateway_id, owner.epoch};
    CGP_ASSIGN_OR_RETURN(out.adaptive_queries, store_.adaptive_queries());
    return out;
  }

  Status begin(const std::string& query_id, const std::string& spec, bool adaptive,
               double worst_charge) override {
    std::lock_guard lock(mutex_);
    CGP_RETURN_IF_ERROR(store_.begin_query(query_id, epoch_, spec, adaptive));
    const Status sent = store_.round_sent(query_id, epoch_, worst_charge);
    // Not sent, then: kept as aborted rather than "running" (best effort; a later leader aborts
    // what is left running).
    if (!sent) (void)store_.abort_query(query_id, epoch_, encode_abort(sent.error()));
    return sent;
  }

  Status finish(const std::string& query_id, const v1::QueryResult& result) override {
    std::lock_guard lock(mutex_);
    return store_.finish_query(
        query_id, epoch_,
        {query_id, result.SerializeAsString(), result.degraded(),
         std::vector<std::uint32_t>(result.lost_shards().begin(), result.lost_shards().end())});
  }

  Expected<std::vector<coordinator::UserId>> users_of(std::span<const std::uint32_t> shards,
                                                      std::uint64_t from_index) override {
    std::lock_guard lock(mutex_);
    CGP_ASSIGN_OR_RETURN(const auto enrolled, store_.enrolled_in(shards, from_index));
    std::vector<coordinator::UserId> out;
    out.reserve(enrolled.size());
    for (const auto& user : enrolled)
      out.push_back(static_cast<coordinator::UserId>(user.user_index));
    return out;
  }

  Status abort(const std::string& query_id, const Error& why) override {
    std::lock_guard lock(mutex_);
    return store_.abort_query(query_id, epoch_, encode_abort(why));
  }

  Expected<v1::QueryResult> result(const std::string& query_id) override {
    std::lock_guard lock(mutex_);
    CGP_ASSIGN_OR_RETURN(const auto stored, store_.result(query_id));
    if (stored) {
      v1::QueryResult out;
      if (!out.ParseFromString(stored->result))
        return make_error(ErrorCode::internal_error, "query_id",
                          "query_id: the stored result does not parse");
      return out;
    }
    CGP_ASSIGN_OR_RETURN(const auto intent, store_.intent(query_id));
    if (!intent)
      return make_error(ErrorCode::invalid_argument, "query_id",
                        "query_id: no query of the cluster has this id");
    if (intent->state == "running")
      return make_error(ErrorCode::unavailable, "query_id",
                        "query_id: " + query_id + " is still running; retry in a moment");
    return decode_abort(intent->reason, query_id);
  }

 private:
  cluster::ClusterStore& store_;
  std::mutex& mutex_;
  const std::int64_t epoch_;
};

}  // namespace

struct ClusterCoordinator::Impl {
  ClusterCoordinatorOptions options;
  std::function<void(const std::string&)> log;
  std::mutex store_mutex;
  std::unique_ptr<cluster::ClusterStore> store;
  std::int64_t epoch = 0;
  std::uint32_t shard_count = 0;
  std::unique_ptr<StoreJournal> journal;
  std::unique_ptr<transport::ControlServer> control;
  std::unique_ptr<transport::MetricsEndpoint> metrics;  // the analyst's queries: before it
  std::unique_ptr<transport::ClusterAnalyst> analyst;
  bool shards_given = false;    // the first assignment waits for min_gateways
  std::string live_seen;        // the live gateways (and lease tokens) the owners were read for
  bool routes_in_sync = false;  // HAProxy routes every shard to its owner (as far as we know)

  // Queries an earlier leader left running: aborted, named. Their intents stay, with every
  // round they sent: a gateway that loads their shards lowers its mirror by them.
  Status abort_orphans() {
    std::lock_guard lock(store_mutex);
    CGP_ASSIGN_OR_RETURN(const auto running, store->running_queries());
    for (const auto& intent : running) {
      if (intent.coordinator_epoch >= epoch) continue;
      const Error why{ErrorCode::unavailable, "coordinator",
                      "coordinator: the coordinator that ran it (epoch " +
                          std::to_string(intent.coordinator_epoch) + ") was lost mid-query"};
      CGP_RETURN_IF_ERROR(store->abort_query(intent.query_id, epoch, encode_abort(why)));
      log("event=query-aborted query=" + log_value(intent.query_id) +
          " reason=orphaned epoch=" + std::to_string(intent.coordinator_epoch));
    }
    return {};
  }

  // Every shard gets an owner among the live gateways: shards of none, or of a gateway whose
  // lease expired, go to the live gateways that hold the fewest. HAProxy is routed to match:
  // every shard once after this process takes the lead or a routing failed (an earlier leader
  // may have died between a move and its route), the moved ones after that.
  Status give_out_shards() {
    std::vector<std::pair<std::uint32_t, std::string>> moves;
    std::vector<cluster::ShardOwner> all;
    const bool route_all = !options.haproxy_socket.empty() && !routes_in_sync;
    {
      std::lock_guard lock(store_mutex);
      CGP_ASSIGN_OR_RETURN(const auto gateways, store->gateways());
      std::map<std::string, std::size_t> live;  // gateway -> shards it holds
      std::string seen;                         // the live gateways and their lease tokens
      for (const auto& gateway : gateways)
        if (gateway.alive) {
          live.emplace(gateway.gateway_id, 0);
          seen += gateway.gateway_id + "#" + std::to_string(gateway.lease_token) + "\n";
        }
      if (live.empty() || (!shards_given && live.size() < options.min_gateways)) return {};
      // Shards move only when a gateway's lease lapses: while the same leases live (and HAProxy
      // is routed), the owners (thousands of rows) need not be read again.
      if (shards_given && seen == live_seen && !route_all) return {};
      CGP_ASSIGN_OR_RETURN(all, store->shard_owners());
      std::vector<char> owned(shard_count, 0);
      for (const auto& owner : all) {
        if (owner.shard >= shard_count) continue;
        const auto holder = live.find(owner.gateway_id);
        if (holder == live.end()) continue;
        owned[owner.shard] = 1;
        ++holder->second;
      }
      for (std::uint32_t shard = 0; shard < shard_count; ++shard) {
        if (owned[shard]) continue;
        auto least = std::min_element(live.begin(), live.end(), [](const auto& a, const auto& b) {
          return a.second < b.second;
        });
        moves.emplace_back(shard, least->first);
        ++least->second;
      }
      shards_given = true;
      if (!moves.empty()) {
        CGP_ASSIGN_OR_RETURN(const auto moved, store->assign_shards(epoch, moves));
        CGP_ASSIGN_OR_RETURN(all, store->shard_owners());
        log("event=shards-given count=" + std::to_string(moved.size()) +
            " gateways=" + std::to_string(live.size()));
      }
      live_seen = seen;
      if (moves.empty() && !route_all) return {};
    }
    if (options.haproxy_socket.empty()) return {};
    // Until every route below is in place, the next check routes every shard again.
    routes_in_sync = false;
    // The map file first (what a restarted HAProxy reads), then the running HAProxy.
    CGP_ASSIGN_OR_RETURN(const std::string map,
                         cluster::haproxy_map(options.address_template, all));
    CGP_RETURN_IF_ERROR(replace_file(options.haproxy_map, "haproxy_map", map));
    if (!route_all) {
      for (const auto& [shard, gateway] : moves)
        CGP_RETURN_IF_ERROR(cluster::haproxy_route_shard(
            options.haproxy_socket, options.haproxy_map, options.address_template, shard, gateway));
    } else {
      for (const auto& owner : all)
        if (!owner.gateway_id.empty())
          CGP_RETURN_IF_ERROR(cluster::haproxy_route_shard(
              options.haproxy_socket, options.haproxy_map, options.address_template, owner.shard,
              owner.gateway_id));
      log("event=haproxy-routed shards=" + std::to_string(all.size()));
    }
    routes_in_sync = true;
    return {};
  }
};

ClusterCoordinator::ClusterCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterCoordinator::~ClusterCoordinator() {
  // The analyst first (no query starts), then the gateways' streams, then the store.
  impl_->analyst.reset();
  impl_->control.reset();
}

Expected<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::lead(
    const ClusterCoordinatorOptions& options, std::function<void(const std::string&)> log,
    const std::atomic<bool>& stop) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->log = log ? std::move(log) : [](const std::string&) {};
  const bool haproxy = !options.haproxy_socket.empty();
  if (haproxy != !options.haproxy_map.empty() || haproxy != !options.address_template.empty())
    return make_error(ErrorCode::invalid_argument, "haproxy",
                      "haproxy: give its admin socket, its map file and the address template "
                      "together, or none");
  if (options.min_gateways == 0)
    return make_error(ErrorCode::out_of_range, "min_gateways", "min_gateways must be at least 1");
  if (!options.control_advertise.empty() && !cluster::valid_host_port(options.control_advertise))
    return make_error(ErrorCode::invalid_argument, "control_advertise",
                      "control_advertise must be host:port");
  // A wildcard address is where this process listens, not where others can dial it.
  for (const auto& [listen, advertise, flag] :
       {std::tuple{options.control_listen, options.control_advertise, "control_advertise"},
        std::tuple{options.analyst_listen, options.analyst_advertise, "analyst_advertise"}}) {
    const std::string host = host_of(listen);
    if (advertise.empty() && (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()))
      return make_error(ErrorCode::invalid_argument, flag,
                        std::string(flag) + ": listening on " + listen +
                            " (every interface), say which address others dial");
  }
  if (!options.analyst_advertise.empty() && !cluster::valid_host_port(options.analyst_advertise))
    return make_error(ErrorCode::invalid_argument, "analyst_advertise",
                      "analyst_advertise must be host:port");
  CGP_ASSIGN_OR_RETURN(impl->store, cluster::ClusterStore::open(options.cluster));
  CGP_ASSIGN_OR_RETURN(const auto settings, impl->store->settings());
  impl->shard_count = settings.shard_count;

  bool said_standby = false;
  for (;;) {
    auto taken = impl->store->try_lead();
    if (taken && *taken) {
      impl->epoch = **taken;
      break;
    }
    if (!said_standby) {
      impl->log(taken ? "event=standby reason=another-coordinator-leads"
                      : "event=standby error=" + log_value(taken.error().to_string()));
      said_standby = true;
    }
    for (auto waited = std::chrono::milliseconds(0); waited < options.poll;
         waited += std::chrono::milliseconds(50)) {
      if (stop)
        return make_error(ErrorCode::unavailable, "stop", "stop: asked to stop as a standby");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  impl->log("event=leading epoch=" + std::to_string(impl->epoch));
  CGP_RETURN_IF_ERROR(impl->abort_orphans());

  transport::ControlServerOptions control;
  control.listen_address = options.control_listen;
  control.tls_certificate_chain = options.tls_certificate_chain;
  control.tls_private_key = options.tls_private_key;
  control.coordinator_epoch = impl->epoch;
  Impl* raw = impl.get();
  control.authenticate = [raw](const std::string& gateway_id, const std::string& credential) {
    std::lock_guard lock(raw->store_mutex);
    const auto digest = raw->store->gateway_credential(gateway_id);
    return digest && *digest && transport::credential_matches(credential, **digest);
  };
  CGP_ASSIGN_OR_RETURN(impl->control, transport::ControlServer::start(control));
  impl->journal = std::make_unique<StoreJournal>(*impl->store, impl->store_mutex, impl->epoch);
  transport::ClusterAnalystOptions analyst;
  analyst.listen_address = options.analyst_listen;
  analyst.tls_certificate_chain = options.tls_certificate_chain;
  analyst.tls_private_key = options.tls_private_key;
  analyst.analyst_credential_sha256 = options.analyst_credential_sha256;
  analyst.adaptive_horizon = options.horizon;
  analyst.log = impl->log;
  if (!options.metrics_listen.empty()) {
    CGP_ASSIGN_OR_RETURN(impl->metrics,
                         transport::MetricsEndpoint::start(options.metrics_listen, {}));
    analyst.metrics = impl->metrics.get();
  }
  CGP_ASSIGN_OR_RETURN(impl->analyst,
                       transport::ClusterAnalyst::start(analyst, *impl->control, *impl->journal));
  const std::string advertised =
      advertised_address(options.control_listen, options.control_advertise, impl->control->port());
  const std::string analyst_advertised =
      advertised_address(options.analyst_listen, options.analyst_advertise, impl->analyst->port());
  CGP_RETURN_IF_ERROR(impl->store->announce_leader(impl->epoch, advertised, analyst_advertised));
  impl->log("event=cluster-coordinator-serving epoch=" + std::to_string(impl->epoch) +
            " control=" + advertised + " analyst=" + analyst_advertised +
            " metrics_port=" + std::to_string(impl->metrics ? impl->metrics->port() : 0));
  return std::unique_ptr<ClusterCoordinator>(new ClusterCoordinator(std::move(impl)));
}

std::int64_t ClusterCoordinator::epoch() const noexcept {
  return impl_->epoch;
}
int ClusterCoordinator::control_port() const noexcept {
  return impl_->control->port();
}
int ClusterCoordinator::analyst_port() const noexcept {
  return impl_->analyst->port();
}

std::string ClusterCoordinator::run_until(const std::atomic<bool>& stop) {
  auto next_check = std::chrono::steady_clock::now();
  while (!stop) {
    if (std::chrono::steady_clock::now() >= next_check) {
      {
        std::lock_guard lock(impl_->store_mutex);
        if (!impl_->store->still_leading())
          return "the lead is lost: the session that held the leader lock ended";
      }
      if (const Status given = impl_->give_out_shards(); !given)
        impl_->log("event=shards-not-given error=" + log_value(given.error().to_string()));
      next_check = std::chrono::steady_clock::now() + impl_->options.poll;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

}  // namespace cgp::tools

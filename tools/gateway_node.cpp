#include "gateway_node.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cgp/cluster/cluster_store.hpp"
#include "cgp/cluster/mirror_blob.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/transport/cluster_queries.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/transport/gateway_control.hpp"
#include "cgp/transport/metrics_endpoint.hpp"
#include "cgp/v1/gateway_control.pb.h"

namespace cgp::tools {

namespace {

using coordinator::UserId;

}  // namespace

struct GatewayNode::Impl {
  GatewayNodeOptions options;
  std::function<void(const std::string&)> log;
  std::mutex store_mutex;  // the lease thread and the query thread share the connection
  std::unique_ptr<cluster::ClusterStore> store;
  double budget = 0;
  std::uint32_t shard_count = 0;
  std::int64_t lease_token = 0;
  std::map<std::uint32_t, std::int64_t> shards;  // owned shard -> ownership epoch
  std::vector<cluster::EnrolledUser> users;      // by user index
  std::uint64_t fleet_users_loaded = 0;          // the fleet's size when `users` were read
  std::chrono::steady_clock::time_point loaded_at;
  std::vector<UserId> ids;
  std::vector<char> revoked;            // as loaded (ShardQueries' copy)
  std::vector<char> revoked_here;       // as loaded, and revoked on the devices' port since
  std::set<std::string> admitted_late;  // enrolled since it loaded, admitted to wait
  std::atomic<bool> query_running{false};
  std::vector<std::string> device_ids;
  std::unique_ptr<transport::DeviceGateway> devices;
  std::unique_ptr<transport::MetricsEndpoint> metrics;  // reads `devices`: declared after it
  std::unique_ptr<transport::NetworkFleet> network;
  std::atomic<bool> fenced{false};
  // Asks nobody once fenced: a gateway that may have lost its shards must not make their
  // devices spend budget.
  std::unique_ptr<transport::StoppableFleet> fleet;
  std::unique_ptr<coordinator::BudgetMirror> mirror;
  std::unique_ptr<transport::ShardQueries> queries;
  std::unique_ptr<transport::ControlLink> link;
  std::mutex end_mutex;
  std::string end_reason;

  void end(const std::string& reason) {
    fenced = true;
    std::lock_guard lock(end_mutex);
    if (end_reason.empty()) end_reason = reason;
  }

  // Takes or renews the lease, with the address HAProxy sends this gateway's devices to.
  Expected<std::int64_t> renew() {
    return store->renew_lease(options.gateway_id, options.advertise, options.lease_ttl);
  }

  Status load() {
    CGP_ASSIGN_OR_RETURN(const auto settings, store->settings());
    budget = settings.budget;
    shard_count = settings.shard_count;
    CGP_ASSIGN_OR_RETURN(lease_token, renew());
    CGP_ASSIGN_OR_RETURN(const auto owners, store->shard_owners());
    std::vector<std::uint32_t> mine;
    for (const auto& owner : owners)
      if (owner.gateway_id == options.gateway_id) {
        shards[owner.shard] = owner.epoch;
        mine.push_back(owner.shard);
      }
    // The size first: whoever enrolled in between is read too, and counted late (never missed).
    CGP_ASSIGN_OR_RETURN(fleet_users_loaded, store->fleet_users());
    CGP_ASSIGN_OR_RETURN(users, store->enrolled_in(mine));
    loaded_at = std::chrono::steady_clock::now();
    for (const auto& user : users) {
      ids.push_back(static_cast<UserId>(user.user_index));
      revoked.push_back(user.credential ? 0 : 1);
      device_ids.push_back(user.device_id);
    }
    revoked_here = revoked;
    mirror = std::make_unique<coordinator::BudgetMirror>(users.size(), budget);
    // The mirror as saved, lowered by every round of every query begun since: never above
    // what a device may have left (never optimistic).
    CGP_ASSIGN_OR_RETURN(const auto snapshots, store->snapshots(mine));
    for (const auto& snapshot : snapshots) {
      CGP_ASSIGN_OR_RETURN(const auto entries, cluster::decode_mirror_blob(snapshot.blob));
      for (const auto& entry : entries) {
        const auto at = std::lower_bound(ids.begin(), ids.end(), entry.user_index);
        if (at != ids.end() && *at == entry.user_index)
          mirror->restore(static_cast<UserId>(at - ids.begin()), entry.remaining);
      }
    }
    // Per shard, every round of every query begun since its snapshot: what it may not hold.
    CGP_ASSIGN_OR_RETURN(const auto unsettled, store->unsettled_charges(mine));
    std::map<std::uint32_t, double> unsettled_of;
    for (std::size_t i = 0; i < mine.size(); ++i) unsettled_of[mine[i]] = unsettled.charges[i];
    double lowered = 0;
    for (std::size_t u = 0; u < users.size(); ++u)
      if (const double charge = unsettled_of[users[u].shard]; charge > 0) {
        mirror->charge_unsettled(static_cast<UserId>(u), coordinator::Charge{charge});
        lowered = std::max(lowered, charge);
      }
    // Saved at once, dated by the read above: the snapshot holds what was lowered (so it is never
    // lowered twice), and every query begun after the read counts against it.
    CGP_RETURN_IF_ERROR(
        store->save_snapshots(options.gateway_id, shard_snapshots("(loaded)"), unsettled.as_of));
    log("event=gateway-loaded shards=" + std::to_string(shards.size()) +
        " users=" + std::to_string(users.size()) + " lowered_by=" + std::to_string(lowered));
    return {};
  }

  // Each owned shard's mirror as one blob, under its epoch.
  std::vector<std::pair<cluster::ShardSnapshot, std::int64_t>> shard_snapshots(
      const std::string& as_of) const {
    std::map<std::uint32_t, std::vector<cluster::MirrorEntry>> by_shard;
    for (std::size_t u = 0; u < users.size(); ++u)
      by_shard[users[u].shard].push_back(
          {users[u].user_index, mirror->remaining(static_cast<UserId>(u))});
    std::vector<std::pair<cluster::ShardSnapshot, std::int64_t>> snapshots;
    for (const auto& [shard, epoch] : shards)
      snapshots.push_back({{shard, cluster::encode_mirror_blob(by_shard[shard]), as_of}, epoch});
    return snapshots;
  }

  // After a query.
  void save_mirror(const std::string& query_id) {
    const auto snapshots = shard_snapshots(query_id);
    std::lock_guard lock(store_mutex);
    const Status saved = store->save_snapshots(options.gateway_id, snapshots);
    if (!saved) {
      log("event=mirror-not-saved query=" + query_id + " error=" + saved.error().to_string());
      if (saved.error().parameter == "epoch") end("a shard of this gateway moved");
    }
  }

  Expected<std::string> run_query(const v1::QueryStart& start, coordinator::ShardReducer& reducer,
                                  const std::atomic<bool>& aborted) {
    // Only the leader's queries reach devices: a coordinator deposed while its control port is
    // still up must not make them spend budget. Checked against the cluster, not the stream.
    // The engine's collectives are still made (with this refusal agreed over every gateway).
    Status leader;
    // Under store_mutex, as keep_lease reads it: no reload for enrolments starts mid-query.
    struct Running {
      std::atomic<bool>& flag;
      ~Running() { flag = false; }
    } running{query_running};
    {
      std::lock_guard lock(store_mutex);
      query_running = true;
      const auto epoch = store->coordinator_epoch();
      if (!epoch)
        leader = epoch.error();
      else if (*epoch != start.coordinator_epoch())
        leader = cluster::stale_epoch("query " + start.query_id() + " of coordinator epoch " +
                                      std::to_string(start.coordinator_epoch()) +
                                      ", the cluster's is " + std::to_string(*epoch));
    }
    if (!leader) {
      log("event=query-refused query=" + start.query_id() + " error=" + leader.error().to_string());
      return leader.error();
    }
    revoke_since_load(start);
    auto result = queries->run(start, reducer, aborted);
    save_mirror(start.query_id());
    return result;
  }

  bool owns_exactly(const std::vector<cluster::ShardOwner>& owners) const {
    std::size_t held = 0;
    for (const auto& owner : owners) {
      if (owner.gateway_id != options.gateway_id) continue;
      const auto mine = shards.find(owner.shard);
      if (mine == shards.end() || mine->second != owner.epoch) return false;
      ++held;
    }
    return held == shards.size();
  }

  // With store_mutex held: whether a device was enrolled on its shards since it loaded. Each
  // such device is admitted at once (it connects and waits, rather than being refused as a
  // stranger), and asked from the reload on.
  bool enrolled_since_load() {
    std::vector<std::uint32_t> mine;
    for (const auto& [shard, epoch] : shards) mine.push_back(shard);
    const auto late = store->enrolled_in(mine, fleet_users_loaded);
    if (!late) return false;
    for (const auto& user : *late)
      if (user.credential && admitted_late.insert(user.device_id).second)
        devices->enrol(user.device_id, *user.credential);
    return !late->empty();
  }

  // Revoked since this gateway loaded (the query's list): its stream ends and its Hello is
  // refused from now on; no query asks it (ShardQueries).
  void revoke_since_load(const v1::QueryStart& start) {
    v1::ClusterQuery query;
    if (!query.ParseFromString(start.spec())) return;
    for (const std::uint64_t user : query.revoked()) {
      const auto at = std::lower_bound(ids.begin(), ids.end(), static_cast<UserId>(user));
      if (at == ids.end() || *at != user) continue;
      const auto u = static_cast<std::size_t>(at - ids.begin());
      if (revoked_here[u]) continue;
      revoked_here[u] = 1;
      if (devices->revoke(device_ids[u]))
        log("event=device-revoked device=" + device_ids[u] + " query=" + start.query_id());
    }
  }

  // One lease renewal; ends the node when the lease lapsed or cannot be kept.
  void keep_lease(std::chrono::steady_clock::time_point& last_renewed) {
    std::lock_guard lock(store_mutex);
    const auto renewed = renew();
    const auto now = std::chrono::steady_clock::now();
    if (renewed) {
      if (*renewed != lease_token) return end("the lease lapsed: its shards may have moved");
      last_renewed = now;
      // Shards given to this gateway or taken from it since it loaded: start again with them.
      if (const auto owners = store->shard_owners(); owners && !owns_exactly(*owners))
        return end("the cluster moved shards to or from this gateway");
      // Not in mid-query: ending now would lose it (a degraded result).
      if (enrolled_since_load() && now - loaded_at >= options.enrolment_reload && !query_running)
        end("devices were enrolled on this gateway's shards");
      return;
    }
    // Stop asking devices before the lease can have expired on the server's clock.
    if (now - last_renewed > options.lease_ttl / 2) {
      fenced = true;
      log("event=gateway-fenced error=" + renewed.error().to_string());
    }
    if (now - last_renewed > options.lease_ttl) end("the lease could not be renewed");
  }
};

GatewayNode::GatewayNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GatewayNode::~GatewayNode() {
  impl_->fenced = true;
  impl_->link.reset();  // no query runs past here
  // A clean stop gives the lease up (its shards can move at once). Ending to be started again
  // (shards moved, a new leader) keeps it: dropping it would make the leader move this
  // gateway's shards to the others, which would then reload too, and so on.
  bool restarting = false;
  {
    std::lock_guard lock(impl_->end_mutex);
    restarting = !impl_->end_reason.empty();
  }
  if (impl_->store && !restarting) {
    std::lock_guard lock(impl_->store_mutex);
    (void)impl_->store->drop_lease(impl_->options.gateway_id);
  }
}

Expected<std::unique_ptr<GatewayNode>> GatewayNode::start(
    const GatewayNodeOptions& options, std::function<void(const std::string&)> log) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.advertise.empty()) impl->options.advertise = options.listen;
  impl->log = log ? std::move(log) : [](const std::string&) {};
  if (options.lease_ttl < std::chrono::milliseconds(300))
    return make_error(ErrorCode::out_of_range, "lease_ttl", "lease_ttl must be at least 300 ms");
  CGP_ASSIGN_OR_RETURN(impl->store, cluster::ClusterStore::open(options.cluster));
  // A gateway that took its lease but cannot serve gives it back: restarted again and again
  // within the lease, it would otherwise hold its shards forever without serving them.
  struct LeaseGiveBack {
    Impl* impl = nullptr;
    ~LeaseGiveBack() {
      if (impl) (void)impl->store->drop_lease(impl->options.gateway_id);
    }
  } give_back{impl.get()};
  CGP_RETURN_IF_ERROR(impl->load());

  transport::GatewayOptions devices;
  devices.address = options.listen;
  devices.frames_address = options.frames_listen;
  devices.tls_certificate_chain = options.tls_certificate_chain;
  devices.tls_private_key = options.tls_private_key;
  for (const auto& user : impl->users)
    if (user.credential) devices.device_credential_digests[user.device_id] = *user.credential;
  devices.log = impl->log;
  // Behind HAProxy every device arrives from HAProxy's address: a per-address cap would cap the
  // whole shard set. The guards per source address are HAProxy's to keep (docs/cluster.md).
  devices.limits.max_connections_per_address = devices.limits.max_connections;
  devices.limits.max_pending_streams_per_address = devices.limits.max_pending_streams;
  // Devices of other shards are told to come back (their shard is moving, or this gateway is
  // about to reload with it), rather than refused as strangers.
  devices.virtual_shards = impl->shard_count;
  for (const auto& [shard, epoch] : impl->shards) devices.served_shards.push_back(shard);
  CGP_ASSIGN_OR_RETURN(impl->devices, transport::DeviceGateway::start(devices));
  if (!options.metrics_listen.empty()) {
    std::size_t enrolled = 0;
    for (const auto& user : impl->users) enrolled += user.credential ? 1 : 0;
    transport::DeviceGateway* served = impl->devices.get();
    CGP_ASSIGN_OR_RETURN(
        impl->metrics, transport::MetricsEndpoint::start(options.metrics_listen,
                                                         {[served] { return served->counters(); },
                                                          [served] { return served->connected(); },
                                                          [enrolled] { return enrolled; }}));
  }
  impl->network = std::make_unique<transport::NetworkFleet>(
      *impl->devices, impl->device_ids, options.dimension, impl->budget, options.round_deadline);
  impl->fleet = std::make_unique<transport::StoppableFleet>(*impl->network, impl->fenced);
  impl->queries = std::make_unique<transport::ShardQueries>(
      *impl->fleet, *impl->mirror, impl->ids, impl->revoked, [raw = impl.get()](UserId global) {
        const auto at = std::lower_bound(raw->ids.begin(), raw->ids.end(), global);
        return at != raw->ids.end() && *at == global
                   ? raw->device_ids[static_cast<std::size_t>(at - raw->ids.begin())]
                   : std::string();
      });

  transport::ControlLinkOptions link;
  link.coordinator_address = options.coordinator;
  if (link.coordinator_address.empty()) {  // whoever leads now, as it announced itself
    CGP_ASSIGN_OR_RETURN(const auto leader, impl->store->leader());
    if (leader.control_address.empty())
      return make_error(ErrorCode::unavailable, "coordinator",
                        "coordinator: no leader has announced its control port yet");
    link.coordinator_address = leader.control_address;
  }
  link.tls_root_certificate = options.control_tls_root;
  link.gateway_id = options.gateway_id;
  link.credential = options.credential;
  link.users = impl->users.size();
  link.fleet_users_loaded = impl->fleet_users_loaded;
  for (const auto& [shard, epoch] : impl->shards) link.shards.emplace_back(shard, epoch);
  Impl* raw = impl.get();
  CGP_ASSIGN_OR_RETURN(
      impl->link, transport::ControlLink::connect(
                      link, [raw](const v1::QueryStart& start, coordinator::ShardReducer& reducer,
                                  const std::atomic<bool>& aborted) {
                        return raw->run_query(start, reducer, aborted);
                      }));
  impl->log("event=gateway-attached coordinator=" + link.coordinator_address +
            " epoch=" + std::to_string(impl->link->coordinator_epoch()));
  give_back.impl = nullptr;  // serving: the lease is the node's now
  return std::unique_ptr<GatewayNode>(new GatewayNode(std::move(impl)));
}

int GatewayNode::device_port() const noexcept {
  return impl_->devices->port();
}
int GatewayNode::metrics_port() const noexcept {
  return impl_->metrics ? impl_->metrics->port() : 0;
}
int GatewayNode::frames_port() const noexcept {
  return impl_->devices->frames_port();
}
std::size_t GatewayNode::users() const noexcept {
  return impl_->users.size();
}

std::string GatewayNode::run_until(const std::atomic<bool>& stop) {
  auto last_renewed = std::chrono::steady_clock::now();
  auto next_renewal = last_renewed;
  while (!stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_renewal) {
      impl_->keep_lease(last_renewed);
      next_renewal = now + impl_->options.lease_ttl / 4;
    }
    if (!impl_->link->connected()) impl_->end("the control stream ended");
    {
      std::lock_guard lock(impl_->end_mutex);
      if (!impl_->end_reason.empty()) return impl_->end_reason;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

}  // namespace cgp::tools

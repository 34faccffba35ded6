#include "cgp/transport/metrics_endpoint.hpp"

#include <chrono>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>

#include "cgp/common/validate.hpp"
#include "connection_admission.hpp"
#include "metrics_http_server.hpp"

namespace cgp::transport {
namespace {

prometheus::MetricFamily family(std::string name, std::string help, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter)
    metric.counter.value = value;
  else
    metric.gauge.value = value;
  return {std::move(name), std::move(help), type, {metric}};
}

// The gateway's counters, read when Prometheus scrapes.
class GatewayCollectable final : public prometheus::Collectable {
 public:
  explicit GatewayCollectable(MetricsEndpoint::Sources sources)
      : sources_(std::move(sources)),
        start_unix_seconds_(
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count()) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    // Counters below count from this start, as Prometheus expects (a restart is a reset);
    // cgp-analyst status shows totals over the coordinator's life.
    out.push_back(family("cgp_start_time_seconds", "When this process started (unix seconds)",
                         prometheus::MetricType::Gauge, start_unix_seconds_));
    if (sources_.connected_devices)
      out.push_back(family("cgp_devices_connected", "Devices with a stream past Hello",
                           prometheus::MetricType::Gauge,
                           static_cast<double>(sources_.connected_devices())));
    if (sources_.enrolled_devices)
      out.push_back(family("cgp_devices_enrolled", "Devices in the enrolment, not revoked",
                           prometheus::MetricType::Gauge,
                           static_cast<double>(sources_.enrolled_devices())));
    if (!sources_.counters) return out;
    const GatewayCounters c = sources_.counters();
    using prometheus::MetricType;
    auto counter = [](std::string name, std::string help, std::uint64_t value) {
      return family(std::move(name), std::move(help), MetricType::Counter,
                    static_cast<double>(value));
    };
    auto gauge = [](std::string name, std::string help, std::size_t value) {
      return family(std::move(name), std::move(help), MetricType::Gauge,
                    static_cast<double>(value));
    };
    const std::vector<prometheus::MetricFamily> devices = {
        gauge("cgp_connections_open", "TCP connections open on the device/analyst port",
              c.open_connections),
        counter("cgp_device_connects_total", "Streams that said Hello and were admitted",
                c.connects),
        counter("cgp_device_disconnects_total", "Admitted streams that ended", c.disconnects),
        counter("cgp_rounds_total", "Rounds of requests sent to devices", c.rounds),
        counter("cgp_rounds_to_deadline_total",
                "Rounds that waited out their deadline with devices still silent",
                c.rounds_to_deadline),
        family("cgp_round_wait_seconds_total", "Time rounds spent waiting for replies",
               MetricType::Counter, static_cast<double>(c.round_wait_microseconds) / 1e6),
        counter("cgp_requests_total", "Requests sent to devices", c.requests),
        counter("cgp_replies_total", "Replies received in time", c.replies),
        counter("cgp_unanswered_total", "Requests with no reply by the round deadline",
                c.unanswered),
        counter("cgp_late_replies_total", "Replies to rounds already closed", c.late_replies),
    };
    out.insert(out.end(), devices.begin(), devices.end());
    prometheus::MetricFamily refused{
        "cgp_refused_total", "Connections and streams refused, by reason", MetricType::Counter, {}};
    const std::uint64_t by_cap = c.refused_total_cap + c.refused_address_cap +
                                 c.refused_descriptors + c.refused_pending_streams;
    for (auto [reason, value] :
         {std::pair{"total_cap", c.refused_total_cap},
          std::pair{"address_cap", c.refused_address_cap},
          std::pair{"descriptors", c.refused_descriptors},
          std::pair{"pending_streams", c.refused_pending_streams},
          // Hello refused (credential, id, protocol) or never sent in time.
          std::pair{"hello",
                    c.refused_connections > by_cap ? c.refused_connections - by_cap : 0}}) {
      prometheus::ClientMetric metric;
      metric.label = {{"reason", reason}};
      metric.counter.value = static_cast<double>(value);
      refused.metric.push_back(std::move(metric));
    }
    out.push_back(std::move(refused));
    return out;
  }

 private:
  MetricsEndpoint::Sources sources_;
  double start_unix_seconds_;
};

}  // namespace

struct MetricsEndpoint::State {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<GatewayCollectable> gateway;
  std::unique_ptr<detail::MetricsHttpServer> server;  // last: stopped before what it reads goes
  prometheus::Family<prometheus::Histogram>* durations = nullptr;
  prometheus::Family<prometheus::Counter>* queries = nullptr;
  std::mutex mutex;  // the per-kind metrics are made on first use
  int port = 0;
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<State> state) : state_(std::move(state)) {}
MetricsEndpoint::~MetricsEndpoint() = default;

Expected<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(const std::string& address,
                                                                  Sources sources) {
  auto parsed = detail::parse_listen_address(address);
  if (!parsed) {
    return make_error(parsed.error().code, "metrics_listen",
                      "metrics_listen: " + parsed.error().message);
  }
  auto state = std::make_unique<State>();
  state->gateway = std::make_shared<GatewayCollectable>(std::move(sources));
  state->durations = &prometheus::BuildHistogram()
                          .Name("cgp_query_duration_seconds")
                          .Help("Wall time of analyst queries, by kind")
                          .Register(*state->registry);
  state->queries = &prometheus::BuildCounter()
                        .Name("cgp_queries_total")
                        .Help(
                            "Analyst queries that ran, by kind and outcome "
                            "(valid/incomplete/degraded)")
                        .Register(*state->registry);
  auto exposition = [gateway = state->gateway, registry = state->registry] {
    auto families = gateway->Collect();
    auto more = registry->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
    return prometheus::TextSerializer().Serialize(families);
  };
  auto server =
      detail::MetricsHttpServer::start(parsed->host, parsed->port, {}, std::move(exposition));
  if (!server) return server.error();
  state->server = std::move(*server);
  state->port = state->server->port();
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(state)));
}

int MetricsEndpoint::port() const noexcept {
  return state_->port;
}

void MetricsEndpoint::observe_query(std::string_view kind, bool valid, double seconds,
                                    bool degraded) {
  // Buckets from 1 ms to ~16 min: a query is a few rounds of a round deadline each.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000};
  std::lock_guard lock(state_->mutex);
  const std::string name(kind);
  state_->durations->Add({{"kind", name}}, kBuckets).Observe(seconds);
  const char* outcome = degraded ? "degraded" : valid ? "valid" : "incomplete";
  state_->queries->Add({{"kind", name}, {"outcome", outcome}}).Increment();
}

}  // namespace cgp::transport

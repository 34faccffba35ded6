// cgp-device-swarm: N simulated devices in one process, each on its own connection to a
// coordinator (gRPC completion queues, or epoll loops for the frames transport, over a fixed set
// of threads: no thread per device), for load and fault tests.
//
//   cgp-device-swarm --coordinator HOST:PORT --count N [--offset K] [--data FILE]
//                    [--projection local|mercator]
//                    [--secrets FILE] [--prefix device-] [--budget RHO] [--seed S]
//                    [--tls-root PEM] [--transport grpc|frames] [--ignore-retry-after]
//                    [--streams-per-connection K] [--queues Q] [--duration SECONDS]
//
// Device i is PREFIX<K+i> at row K+i of --data (projected like cgp-sim does), or of cgp-sim's
// built-in synthetic city (seed --seed) without --data: several swarms with disjoint --offset
// ranges serve one enrolment. --secrets: the CSV "id,credential" that
// `cgp-coordinator enrol --count` wrote. --transport frames: the lean transport (TLS 1.3 frames,
// docs/protocol.md §2b) on the coordinator's device frames port, one connection per device; it
// needs --tls-root. --ignore-retry-after: redial on the devices' own backoff even when the
// coordinator says when to come back (tests of its pace steering). Runs until SIGINT/SIGTERM or
// --duration; prints its counters every 10 s and at the end. Exit 2 on bad arguments, 3 on
// unreadable data.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "cgp/common/files.hpp"
#include "cgp/common/version.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-device-swarm: %s\n", message.c_str());
  return code;
}

void report(const cgp::swarm::DeviceSwarm& swarm) {
  const auto c = swarm.counters();
  std::fprintf(stderr,
               "event=swarm connected=%zu welcomes=%llu requests=%llu replies=%llu "
               "refused_connections=%llu lost_connections=%llu\n",
               swarm.connected(), static_cast<unsigned long long>(c.welcomes),
               static_cast<unsigned long long>(c.requests),
               static_cast<unsigned long long>(c.replies),
               static_cast<unsigned long long>(c.refused_connections),
               static_cast<unsigned long long>(c.lost_connections));
}

int run(int argc, char** argv) {
  CLI::App app{"cgp-device-swarm: many simulated devices serving a cgpkit coordinator"};
  cgp::tools::add_common_flags(app, /*config_file=*/true);
  std::string coordinator, data_file, projection = "local", secrets_file, prefix = "device-",
                                      tls_root_file, transport = "grpc";
  std::size_t count = 0, offset = 0, per_connection = 500, queues = 4;
  double budget = 1.0, duration = 0;
  std::uint64_t seed = 1;
  bool ignore_retry_after = false;
  std::string address_template;
  std::uint32_t virtual_shards = 0;
  app.add_option("--coordinator", coordinator, "HOST:PORT")->required();
  app.add_option("--count", count, "number of devices")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->required();
  app.add_option("--offset", offset, "first device number and data row")
      ->check(CLI::Range(std::size_t{0}, std::size_t{100000000}))
      ->capture_default_str();
  app.add_option("--data", data_file, "CSV of locations (lon,lat or x,y)");
  app.add_option("--projection", projection, "local|mercator, for lon/lat data")
      ->capture_default_str();
  app.add_option("--secrets", secrets_file, "CSV id,credential (cgp-coordinator enrol --count)");
  app.add_option("--prefix", prefix, "device id prefix")->capture_default_str();
  app.add_option("--budget", budget, "each device's total rho (per m^2: locations in metres)")
      ->capture_default_str();
  app.add_option("--seed", seed, "noise seed (and the synthetic city's)")->capture_default_str();
  app.add_option("--tls-root", tls_root_file, "PEM root certificate of the coordinator");
  app.add_option("--transport", transport,
                 "grpc|frames (frames: the coordinator's device frames port; needs --tls-root)")
      ->capture_default_str();
  app.add_flag("--ignore-retry-after", ignore_retry_after,
               "frames: redial on the devices' own backoff, not when the coordinator says");
  app.add_option("--address-template", address_template,
                 "frames, live tier: each device's TLS name is its shard's host in this template "
                 "(e.g. s{shard}.devices.example.org:443); every connection goes to --coordinator "
                 "(HAProxy)");
  app.add_option("--virtual-shards", virtual_shards,
                 "the fleet's virtual shards, with "
                 "--address-template")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--streams-per-connection", per_connection, "devices per TCP connection")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  app.add_option("--queues", queues, "gRPC completion queues or frames epoll loops (a thread each)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str();
  app.add_option("--duration", duration, "seconds to run (0 = until SIGINT/SIGTERM)")
      ->check(cgp::tools::finite_in(0.0, 86400.0 * 365))
      ->capture_default_str();
  if (auto done = cgp::tools::parse_command_line(app, argc, argv, "cgp-device-swarm")) return *done;
  auto config = cgp::DeviceConfig::cgp(budget);
  if (!config) return fail(2, "--budget: " + config.error().message);
  auto kind = cgp::geometry::parse_projection_kind(projection);
  if (!kind) return fail(2, "--projection must be local or mercator, got '" + projection + "'");
  if (transport != "grpc" && transport != "frames")
    return fail(2, "--transport must be grpc or frames, got '" + transport + "'");
  // Frames are TLS only: checked here, before the data is read, like the other flags.
  if (transport == "frames" && tls_root_file.empty())
    return fail(2, "--transport frames needs --tls-root (the frames transport is TLS only)");
  if (!address_template.empty() && (transport != "frames" || virtual_shards == 0))
    return fail(2, "--address-template needs --transport frames and --virtual-shards");

  cgp::experiments::Dataset data;
  if (data_file.empty()) {
    data = cgp::experiments::synthetic_locations(offset + count, seed);
  } else {
    auto loaded = cgp::experiments::load_locations(data_file, *kind);
    if (!loaded) return fail(3, loaded.error().message);
    data = std::move(*loaded);
    // Rows offset .. offset + count − 1 must all be there (on 51cfbc1 a large --offset read past
    // the end of the data).
    if (data.size() < offset + count)
      return fail(2, "--offset/--count: " + data_file + " has " + std::to_string(data.size()) +
                         " rows; rows " + std::to_string(offset) + ".." +
                         std::to_string(offset + count - 1) + " were asked for");
  }
  std::map<std::string, std::string> secrets;
  if (!secrets_file.empty()) {
    auto text = cgp::read_file(secrets_file, "--secrets", cgp::kMaxEnrolmentFileBytes);
    if (!text) return fail(3, text.error().message);
    std::istringstream in(std::move(*text));
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); ++number) {
      const auto comma = line.find(',');
      if (comma == std::string::npos)
        return fail(3, "--secrets: " + secrets_file + ":" + std::to_string(number) +
                           ": expected 'id,credential'");
      secrets[line.substr(0, comma)] = line.substr(comma + 1);
    }
  }
  std::vector<cgp::swarm::SwarmMember> members;
  members.reserve(count);
  for (std::size_t row = offset; row < offset + count; ++row) {
    const std::string id = prefix + std::to_string(row);
    auto secret = secrets.find(id);
    if (!secrets_file.empty() && secret == secrets.end())
      return fail(2, "--secrets: no credential for " + id);
    members.push_back({id,
                       secret == secrets.end() ? "" : secret->second,
                       {data.points[2 * row], data.points[2 * row + 1]}});
  }
  cgp::swarm::SwarmOptions options;
  options.coordinator_address = coordinator;
  options.config = *config;
  options.seed = seed;
  options.first_stream = offset;
  options.streams_per_connection = per_connection;
  options.completion_queues = queues;
  options.transport =
      transport == "frames" ? cgp::link::DeviceTransport::frames : cgp::link::DeviceTransport::grpc;
  options.obey_retry_after = !ignore_retry_after;
  options.address_template = address_template;
  options.virtual_shards = virtual_shards;
  if (!tls_root_file.empty()) {
    auto root = cgp::read_file(tls_root_file, "--tls-root");
    if (!root) return fail(3, root.error().message);
    options.tls_root_certificate = std::move(*root);
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto swarm = cgp::swarm::DeviceSwarm::start(options, std::move(members));
  if (!swarm) return fail(2, swarm.error().message);
  const auto start = std::chrono::steady_clock::now();
  timespec tick{10, 0};
  for (;;) {
    if (duration > 0) {
      const double left =
          duration -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (left <= 0) break;
      tick.tv_sec = static_cast<time_t>(std::min(10.0, left));
      tick.tv_nsec =
          static_cast<long>((std::min(10.0, left) - static_cast<double>(tick.tv_sec)) * 1e9);
    }
    siginfo_t info;
    if (sigtimedwait(&signals, &info, &tick) > 0) break;
    report(**swarm);
  }
  report(**swarm);
  swarm->reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cgp::protocol::turn_off_lock_order_graph();
  return cgp::tools::guarded_main("cgp-device-swarm", [&] { return run(argc, argv); });
}

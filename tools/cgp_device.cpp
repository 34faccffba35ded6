// cgp-device: one real device — its own ledger (SQLite), filter and secure noise — serving a
// coordinator over gRPC until the coordinator closes the stream.
//
//   cgp-device --coordinator HOST:PORT --id ID [--credential FILE] [--tls-root FILE]
//              [--transport grpc|frames]
//              --ledger PATH --budget RHO [--sticky-halt]
//              [--location X,Y | --lonlat LON,LAT] [--component NAME=V1,V2,...]...
//              [--components FILE]
//              [--reconnect | --check-in IDLE_MS] [--min-tick-seconds S] [--max-watches N]
//
// --check-in IDLE_MS: a phone's background task: connect once, answer what the coordinator
// queued for this device, leave after IDLE_MS without a request (exit 0); run it again later.
// --reconnect: when the coordinator goes away (a restart, a network cut), dial again with
// backoff from 100 ms to 5 s, until the process is stopped; a refused credential or Hello, or a
// frame this device cannot take, still exits.
// --lonlat: the device's GPS position, projected on the device into 'location' with the frame
// the coordinator announces in its Welcome (a coordinator without --frame is an error).
// --components FILE: one component per line, "name,v1,v2,...". Exit 0 when the coordinator
// ends the session, 1 on a refused credential or lost connection, 2 on bad arguments or
// values, 3 on a missing, unreadable or invalid file.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/common/files.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/version.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/protocol/grpc_runtime.hpp"
#include "cgp/protocol/log_format.hpp"
#include "cli_support.hpp"
#include "guarded_main.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-device: %s\n", message.c_str());
  return code;
}

bool parse_values(const std::string& text, std::vector<double>& out) {
  out.clear();
  std::stringstream cells(text);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    try {
      std::size_t used = 0;
      out.push_back(std::stod(cell, &used));
      if (used != cell.size()) return false;
    } catch (...) {
      return false;
    }
  }
  return !out.empty();
}

int run(int argc, char** argv) {
  CLI::App app{"cgp-device: one device serving a cgpkit coordinator"};
  cgp::tools::add_common_flags(app, /*config_file=*/true);
  std::string coordinator, id, credential_file, tls_root_file, ledger, components_file;
  double budget = 0;
  bool sticky = false, reconnect = false;
  std::vector<double> location, lonlat;
  std::vector<std::string> components;
  app.add_option("--coordinator", coordinator,
                 "HOST:PORT, or with --virtual-shards a template such as "
                 "s{shard}.devices.example.org:443")
      ->required();
  std::uint32_t virtual_shards = 0;
  app.add_option("--virtual-shards", virtual_shards,
                 "the live fleet's virtual shards: dial --coordinator's {shard} filled with this "
                 "device's shard (docs/cluster.md); 0: one address")
      ->check(CLI::Range(0u, 1u << 20));
  std::string connect_to;
  app.add_option("--connect-to", connect_to,
                 "HOST:PORT to dial instead, keeping --coordinator's host as the TLS name and SNI");
  app.add_option("--id", id, "this device's id")->required();
  app.add_option("--credential", credential_file,
                 "file holding this device's credential (trailing newlines ignored)");
  app.add_option("--tls-root", tls_root_file, "PEM root certificate of the coordinator");
  std::string transport = "grpc";
  app.add_option("--transport", transport,
                 "grpc (the coordinator's --listen port) or frames (its --device-frames-listen "
                 "port: the lean TLS transport, needs --tls-root)")
      ->capture_default_str();
  app.add_option("--ledger", ledger, "SQLite ledger file (created if absent)")->required();
  app.add_option("--budget", budget,
                 "total rho of the CGP filter (per m^2 for locations in metres)")
      ->required();
  app.add_flag("--sticky-halt", sticky, "halt for good after the first refusal (Alg. 1)");
  auto* metres =
      app.add_option("--location", location, "X,Y in metres: component 'location'")->delimiter(',');
  app.add_option("--lonlat", lonlat,
                 "LON,LAT in degrees: 'location', projected in the coordinator's frame")
      ->delimiter(',')
      ->excludes(metres);
  app.add_option("--component", components, "NAME=V1,V2,... (repeatable)");
  app.add_option("--components", components_file, "file: one 'name,v1,v2,...' per line");
  auto* redial =
      app.add_flag("--reconnect", reconnect, "dial again whenever the coordinator goes away");
  long check_in_ms = 0;
  app.add_option("--check-in", check_in_ms,
                 "check in once: answer what is queued, leave after this many ms of quiet")
      ->check(CLI::Range(1L, 3600L * 1000))
      ->excludes(redial);
  cgp::link::WatchLimits watch_limits;
  app.add_option("--min-tick-seconds", watch_limits.min_tick_seconds,
                 "refuse watches that would tick more often than this")
      ->check(CLI::Range(cgp::link::WatchLimits::kTickSecondsFloor,
                         cgp::link::WatchLimits::kTickSecondsCeiling))
      ->capture_default_str();
  app.add_option("--max-watches", watch_limits.max_watches, "watches ticking at once, at most")
      ->check(CLI::Range(std::size_t{1}, cgp::link::WatchLimits::kMaxWatchesCeiling))
      ->capture_default_str();
  if (auto done = cgp::tools::parse_command_line(app, argc, argv, "cgp-device")) return *done;
  auto config = cgp::DeviceConfig::cgp(budget, sticky);
  if (!config) return fail(2, "--budget: " + config.error().message);

  // Every argument and file is checked before the ledger is opened (or created).
  if (auto usable = cgp::protocol::require_id("--id", id); !usable)
    return fail(2, usable.error().message);
  std::vector<std::pair<std::string, std::vector<double>>> values;
  if (!location.empty()) values.emplace_back("location", location);
  for (const auto& spec : components) {
    const auto equals = spec.find('=');
    std::vector<double> v;
    if (equals == std::string::npos || !parse_values(spec.substr(equals + 1), v))
      return fail(2, "--component must be NAME=V1,V2,..., got '" + spec + "'");
    values.emplace_back(spec.substr(0, equals), v);
  }
  if (!components_file.empty()) {
    auto text = cgp::read_file(components_file, "--components");
    if (!text) return fail(3, text.error().message);
    std::istringstream in(std::move(*text));
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); ++number) {
      if (line.empty()) continue;
      const auto comma = line.find(',');
      std::vector<double> v;
      if (comma == std::string::npos || !parse_values(line.substr(comma + 1), v))
        return fail(3, "--components: " + components_file + ":" + std::to_string(number) +
                           ": expected 'name,v1,v2,...'");
      values.emplace_back(line.substr(0, comma), v);
    }
  }
  cgp::link::DeviceConnection connection;
  if (transport == "frames") {
    if (tls_root_file.empty()) return fail(2, "--transport: frames is TLS only; give --tls-root");
    connection.transport = cgp::link::DeviceTransport::frames;
  } else if (transport != "grpc") {
    return fail(2, "--transport must be grpc or frames, got '" + transport + "'");
  }
  connection.coordinator_address = coordinator;
  connection.virtual_shards = virtual_shards;
  connection.connect_to = connect_to;
  connection.device_id = id;
  connection.watch_limits = watch_limits;
  connection.check_in_idle = std::chrono::milliseconds(check_in_ms);
  if (!lonlat.empty()) {
    if (lonlat.size() != 2) return fail(2, "--lonlat must be LON,LAT");
    if (auto valid = cgp::geometry::require_lonlat(lonlat[0], lonlat[1]); !valid)
      return fail(2, "--lonlat: " + valid.error().message);
    connection.lonlat = std::array<double, 2>{lonlat[0], lonlat[1]};
  }
  if (auto unreadable = cgp::tools::read_client_files(
          credential_file, tls_root_file, connection.credential, connection.tls_root_certificate))
    return fail(3, unreadable->message);

  auto device = cgp::client::Device::open_secure(*config, ledger.c_str());
  if (!device) return fail(1, device.error().message);
  if (!device->ledger_status().ok())
    std::fprintf(stderr, "cgp-device: %s (the device will refuse every request)\n",
                 device->ledger_status().error().message.c_str());
  for (const auto& [name, v] : values) {
    if (auto s = device->register_component(name, v.size()); !s) return fail(2, s.error().message);
    if (auto s = device->set_component(name, v); !s) return fail(2, s.error().message);
  }

  if (!reconnect) {
    auto served = cgp::link::serve_device(connection, *device);
    return served.ok() ? 0 : fail(1, served.error().message);
  }
  // Runs until the process is stopped, unless the coordinator refuses this device for good.
  auto served = cgp::link::serve_device_reconnecting(connection, *device);
  return served.ok() ? 0 : fail(1, served.error().message);
}

}  // namespace

int main(int argc, char** argv) {
  cgp::protocol::turn_off_lock_order_graph();
  return cgp::tools::guarded_main("cgp-device", [&] { return run(argc, argv); });
}

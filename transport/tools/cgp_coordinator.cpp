// cgp-coordinator: the coordinator as a network service, and its enrolment helpers.
//
//   cgp-coordinator serve --listen HOST:PORT --devices FILE --analyst-credential FILE
//                         [--tls-cert PEM --tls-key PEM] [--budget RHO] [--dimension D]
//                         [--deadline-ms MS] [--horizon H] [--queues Q] [--quiet]
//   cgp-coordinator enrol --devices FILE --id ID --credential-out FILE
//   cgp-coordinator enrol --devices FILE --count N [--prefix P] --secrets-out FILE
//   cgp-coordinator credential --out FILE
//
// serve runs until SIGINT or SIGTERM; it logs one line per event to stderr. Exit 2 on bad
// arguments, 1 when the service cannot start.
#include <signal.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <string>

#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/files.hpp"
#include "cgp/transport/log_format.hpp"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgp-coordinator: %s\n", message.c_str());
  return code;
}

// Secrets are written readable by their owner only.
bool write_secret(const std::string& path, const std::string& text) {
  const mode_t previous = ::umask(077);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ::umask(previous);
  return static_cast<bool>(out);
}

// ISO 8601 UTC with milliseconds, for the event log.
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(millis));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cgp-coordinator: run a cgpkit coordinator service, enrol devices"};
  app.require_subcommand(1);
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });

  std::string listen = "127.0.0.1:7070", devices_file, analyst_file, tls_cert, tls_key;
  double budget = 1.0;
  std::size_t dimension = 2, horizon = 20;
  long deadline_ms = 5000;
  bool quiet = false;
  std::size_t queues = 8;
  auto* serve = app.add_subcommand("serve", "run the coordinator until SIGINT/SIGTERM");
  serve->add_option("--listen", listen, "HOST:PORT for devices and analysts");
  serve->add_option("--devices", devices_file, "enrolment file (id,sha256 lines)")->required();
  serve->add_option("--analyst-credential", analyst_file, "file holding the analyst credential")
      ->required();
  serve->add_option("--tls-cert", tls_cert, "PEM certificate chain (TLS)");
  serve->add_option("--tls-key", tls_key, "PEM private key (TLS)");
  serve->add_option("--budget", budget, "each device's total rho (its CGP filter)");
  serve->add_option("--dimension", dimension, "dimension of the queried component");
  serve->add_option("--deadline-ms", deadline_ms, "per-round deadline in milliseconds");
  serve->add_option("--horizon", horizon, "queries the adaptive allocation plans for");
  serve->add_flag("--quiet", quiet, "no event log on stderr");
  serve->add_option("--queues", queues,
                    "gRPC completion queues for device streams (a thread each)");
  cgp::transport::ConnectionLimits limits;
  long handshake_ms = limits.handshake_timeout.count(), idle_ms = limits.idle_timeout.count(),
       hello_ms = 10000, keepalive_ms = limits.keepalive_time.count();
  serve
      ->add_option("--max-connections", limits.max_connections,
                   "open TCP connections in all (lowered to the descriptor budget)")
      ->capture_default_str();
  serve
      ->add_option("--max-connections-per-address", limits.max_connections_per_address,
                   "open TCP connections per peer IP address")
      ->capture_default_str();
  serve
      ->add_option("--max-pending-streams", limits.max_pending_streams,
                   "device streams not yet past Hello, in all")
      ->capture_default_str();
  serve
      ->add_option("--max-pending-streams-per-address", limits.max_pending_streams_per_address,
                   "device streams not yet past Hello, per peer IP address")
      ->capture_default_str();
  serve->add_option("--handshake-timeout-ms", handshake_ms, "TCP accept to HTTP/2 settings, ms")
      ->capture_default_str();
  serve->add_option("--hello-timeout-ms", hello_ms, "stream start to the device's Hello, ms")
      ->capture_default_str();
  serve->add_option("--idle-timeout-ms", idle_ms, "a connection with no call open is closed, ms")
      ->capture_default_str();
  serve->add_option("--keepalive-ms", keepalive_ms, "HTTP/2 keepalive ping interval, ms")
      ->capture_default_str();

  std::string enrol_devices, id, credential_out, prefix = "device-", secrets_out;
  std::size_t count = 0;
  auto* enrol = app.add_subcommand("enrol", "enrol devices: new credentials, digests appended");
  enrol->add_option("--devices", enrol_devices, "enrolment file to append to")->required();
  enrol->add_option("--id", id, "one device's id");
  enrol->add_option("--credential-out", credential_out, "where the device's credential goes");
  enrol->add_option("--count", count, "enrol N devices PREFIX0 .. PREFIX(N-1)");
  enrol->add_option("--prefix", prefix, "id prefix for --count");
  enrol->add_option("--secrets-out", secrets_out, "CSV id,credential for --count (swarms)");

  std::string credential_file;
  auto* credential = app.add_subcommand("credential", "write a fresh analyst credential");
  credential->add_option("--out", credential_file, "file to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail(2, e.what());
  }

  if (credential->parsed()) {
    if (!write_secret(credential_file, cgp::transport::new_credential() + "\n"))
      return fail(2, "--out: cannot write " + credential_file);
    return 0;
  }

  if (enrol->parsed()) {
    std::vector<std::string> ids;
    if (!id.empty() && count == 0 && !credential_out.empty()) {
      ids.push_back(id);
    } else if (id.empty() && count > 0 && !secrets_out.empty()) {
      for (std::size_t i = 0; i < count; ++i) ids.push_back(prefix + std::to_string(i));
    } else {
      return fail(2, "enrol needs either --id and --credential-out, or --count and --secrets-out");
    }
    for (const auto& each : ids)
      if (auto valid = cgp::transport::require_id(count > 0 ? "--prefix" : "--id", each); !valid)
        return fail(2, valid.error().message);
    std::string digests, secrets;
    for (const auto& each : ids) {
      const std::string secret = cgp::transport::new_credential();
      digests += each + "," + cgp::transport::sha256_hex(cgp::transport::sha256_of(secret)) + "\n";
      secrets += count > 0 ? each + "," + secret + "\n" : secret + "\n";
    }
    if (!write_secret(count > 0 ? secrets_out : credential_out, secrets))
      return fail(2, "cannot write " + (count > 0 ? secrets_out : credential_out));
    std::ofstream out(enrol_devices, std::ios::app);
    if (!(out << digests)) return fail(2, "--devices: cannot append to " + enrol_devices);
    return 0;
  }

  // serve
  auto enrolled = cgp::transport::read_enrolment(devices_file);
  if (!enrolled) return fail(2, "--devices: " + enrolled.error().message);
  std::string analyst_secret;
  if (!cgp::transport::read_secret(analyst_file, analyst_secret) || analyst_secret.empty())
    return fail(2, "--analyst-credential: cannot read a credential from " + analyst_file);
  cgp::transport::CoordinatorOptions options;
  options.gateway.address = listen;
  options.gateway.completion_queues = queues;
  if (tls_cert.empty() != tls_key.empty()) return fail(2, "--tls-cert and --tls-key go together");
  if (!tls_cert.empty() &&
      (!cgp::transport::read_file(tls_cert, options.gateway.tls_certificate_chain) ||
       !cgp::transport::read_file(tls_key, options.gateway.tls_private_key)))
    return fail(2, "--tls-cert/--tls-key: cannot read the PEM files");
  for (const auto& [device, digest] : *enrolled) {
    options.device_ids.push_back(device);
    options.gateway.device_credential_digests[device] = digest;
  }
  options.analyst_credential_sha256 = cgp::transport::sha256_of(analyst_secret);
  options.device_budget = budget;
  options.dimension = dimension;
  options.horizon = horizon;
  if (deadline_ms <= 0) return fail(2, "--deadline-ms must be > 0");
  for (auto [flag, ms] :
       {std::pair{"--handshake-timeout-ms", handshake_ms},
        std::pair{"--hello-timeout-ms", hello_ms}, std::pair{"--idle-timeout-ms", idle_ms},
        std::pair{"--keepalive-ms", keepalive_ms}})
    if (ms <= 0 || ms > 365L * 24 * 3600 * 1000)
      return fail(2, std::string(flag) + " must be between 1 and a year of milliseconds");
  limits.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  limits.idle_timeout = std::chrono::milliseconds(idle_ms);
  limits.keepalive_time = std::chrono::milliseconds(keepalive_ms);
  options.gateway.limits = limits;
  options.gateway.hello_timeout = std::chrono::milliseconds(hello_ms);
  options.round_deadline = std::chrono::milliseconds(deadline_ms);
  static std::mutex log_mutex;
  if (!quiet)
    options.gateway.log = [](const std::string& line) {
      std::lock_guard lock(log_mutex);
      std::fprintf(stderr, "ts=%s %s\n", utc_now().c_str(), line.c_str());
    };

  // Signals are taken by sigwait below, not by a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto service = cgp::transport::CoordinatorService::start(options);
  if (!service) return fail(1, service.error().message);
  std::fprintf(stderr,
               "event=listening address=%s port=%d devices=%zu tls=%s max_connections=%zu\n",
               listen.c_str(), (*service)->port(), options.device_ids.size(),
               tls_cert.empty() ? "off" : "on", (*service)->gateway().max_connections());
  if (tls_cert.empty())
    std::fprintf(stderr,
                 "cgp-coordinator: plaintext — credentials cross the network in clear; "
                 "use --tls-cert/--tls-key beyond loopback\n");
  int received = 0;
  sigwait(&signals, &received);
  std::fprintf(stderr, "event=stopping signal=%d\n", received);
  service->reset();
  return 0;
}

// The coordinator's side of the network (DESIGN §4): a gRPC server devices dial into, and a
// Fleet over the connected devices, so that the query engine runs unchanged over the network.
//
// Device streams run on gRPC's completion-queue API over a fixed set of threads: no thread
// per device.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cgp/common/expected.hpp"
#include "cgp/coordinator/fleet.hpp"
#include "cgp/transport/credentials.hpp"

namespace grpc {
class Service;
}

namespace cgp::transport {

class NetworkFleet;

struct GatewayOptions {
  std::string address = "127.0.0.1:0";  // port 0 picks a free port
  // TLS: PEM server certificate chain and private key. Empty: plaintext (loopback tests only).
  std::string tls_certificate_chain, tls_private_key;
  // device id -> credential. Non-empty: a device must present its own id's credential in Hello,
  // or its connection is refused (UNAUTHENTICATED) before it can take part.
  std::map<std::string, std::string> device_credentials;
  // The same by SHA-256 digest, as an enrolment file keeps them (the secrets stay on devices).
  std::map<std::string, CredentialSha256> device_credential_digests;
  // Further gRPC services served on the same port (e.g. the analyst service), each made once.
  std::vector<std::function<std::unique_ptr<grpc::Service>()>> extra_services;
  // Device streams are spread over this many completion queues, a thread each (not a thread
  // per device). More queues make each completion cheaper when many devices are connected.
  std::size_t completion_queues = 8;
  // A connection that has not said Hello by then is ended (counted as refused).
  std::chrono::milliseconds hello_timeout{10000};
  // Structured log: one line per event ("event=connect device=d-17"), e.g. to stderr; called
  // from several threads at once. Empty: no log.
  std::function<void(const std::string&)> log;
};

// What the gateway has seen since it started.
struct GatewayCounters {
  std::uint64_t connects = 0, disconnects = 0, refused_connections = 0;
  std::uint64_t rounds = 0, requests = 0, replies = 0, unanswered = 0;
  std::uint64_t late_replies = 0;  // replies to rounds already closed (or never asked)
};

class DeviceGateway {
 public:
  static Expected<std::unique_ptr<DeviceGateway>> start(const GatewayOptions& options);
  // Plaintext, no credentials.
  static Expected<std::unique_ptr<DeviceGateway>> start(const std::string& address);
  ~DeviceGateway();
  int port() const noexcept;
  std::size_t connected() const;
  GatewayCounters counters() const;
  // Waits until at least `count` devices have said Hello, or the timeout passes.
  bool wait_for_devices(std::size_t count, std::chrono::milliseconds timeout) const;

 private:
  friend class NetworkFleet;
  struct Impl;
  explicit DeviceGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Users are devices by id: user i is device_ids[i]. A device that is not connected, or does not
// answer within the round deadline, is reported as no_answer.
class NetworkFleet final : public coordinator::Fleet {
 public:
  NetworkFleet(DeviceGateway& gateway, std::vector<std::string> device_ids, std::size_t dimension,
               double initial_budget, std::chrono::milliseconds round_deadline);
  std::size_t size() const noexcept override { return device_ids_.size(); }
  std::size_t dimension() const noexcept override { return dimension_; }
  double initial_budget() const noexcept override { return initial_budget_; }
  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override;

 private:
  DeviceGateway& gateway_;
  std::vector<std::string> device_ids_;
  std::size_t dimension_;
  double initial_budget_;
  std::chrono::milliseconds round_deadline_;
};

}  // namespace cgp::transport

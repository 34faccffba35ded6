// Internals of DeviceGateway, shared by the gateway's stream reactor and NetworkFleet.
//
// Threading: gRPC's callback API runs every stream on its own small pool (no thread per device).
// A device's replies are delivered straight into the round that asked for them (PendingRound),
// keyed by (query id, round) and by the id the stream authenticated as, never by anything the
// reply itself claims.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sodium.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cgp/coordinator/fleet.hpp"
#include "cgp/transport/gateway.hpp"
#include "cgp/v1/service.grpc.pb.h"

namespace cgp::transport::detail {

using ReplyKey = std::pair<std::string, std::uint32_t>;
using CredentialDigest = std::array<unsigned char, crypto_hash_sha256_BYTES>;

class DeviceStream;

// A connected device: the write side of its stream. Writes are queued because a callback stream
// takes one write at a time; Finish waits for the write in flight.
class Session {
 public:
  Session(std::string id, DeviceStream* stream) : id_(std::move(id)), stream_(stream) {}
  const std::string& id() const noexcept { return id_; }
  // False when the stream is finishing or gone.
  bool push(v1::CoordinatorToDevice message);
  void finish(grpc::Status status);
  // From the stream's reactions only.
  void on_write_done(bool ok);
  void detach();

 private:
  const std::string id_;
  std::mutex mutex_;
  DeviceStream* stream_;  // null once the stream is done
  std::deque<v1::CoordinatorToDevice> queue_;
  bool writing_ = false, finish_requested_ = false;
  grpc::Status finish_status_;
};

// One round in flight: where the replies go and how many are still awaited.
struct PendingRound {
  std::mutex mutex;
  std::condition_variable settled;
  bool open = true;
  std::size_t awaited = 0;
  std::size_t output_dimension = 0;
  std::unordered_map<std::string_view, std::size_t> slot_of_device;  // device id -> k
  std::vector<bool> settled_slot;
  coordinator::RoundReplies* replies = nullptr;
};

class GatewayCore {
 public:
  // A new device stream (the reactor deletes itself when gRPC is done with it).
  grpc::ServerBidiReactor<v1::DeviceToCoordinator, v1::CoordinatorToDevice>* open_stream();

  // Checks a Hello; the error is the status the stream finishes with.
  grpc::Status admit(const v1::Hello& hello) const;
  void attach(const std::shared_ptr<Session>& session);
  void detach(const std::shared_ptr<Session>& session);
  void deliver(const std::string& device_id, const v1::DeviceReply& reply);

  std::shared_ptr<Session> session(const std::string& id) const;
  bool open_round(const ReplyKey& key, const std::shared_ptr<PendingRound>& round);
  void close_round(const ReplyKey& key, PendingRound& round);

  void log(const std::string& line) const {
    if (log_sink) log_sink(line);
  }
  template <class Update>
  void count(Update&& update) {
    std::lock_guard lock(counters_mutex);
    update(counts);
  }

  std::vector<std::unique_ptr<grpc::Service>> endpoints;  // the device service and extras
  std::unique_ptr<grpc::Server> server;
  std::map<std::string, CredentialDigest> credential_digests;  // device id -> SHA-256
  int port = 0;
  std::function<void(const std::string&)> log_sink;

  mutable std::mutex mutex;  // sessions
  mutable std::condition_variable changed;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions;
  bool shutting_down = false;

  std::mutex rounds_mutex;
  std::map<ReplyKey, std::shared_ptr<PendingRound>> rounds;

  mutable std::mutex counters_mutex;
  GatewayCounters counts;
};

}  // namespace cgp::transport::detail

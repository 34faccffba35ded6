// Streams and calls counted from their headers (health, reflection, analyst calls): each is
// counted per TCP connection, per peer address and in all before it is served, and is ended
// after a lifetime, so that no client can make the coordinator hold them without limit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <grpcpp/support/status.h>

#include "cgp/transport/gateway.hpp"  // StreamCaps

namespace cgp::transport::detail {

// What the registry can end: a stream's reactor. end() may be called more than once and from
// any thread; it must not call back into the registry (the reactor's OnDone calls forget()).
// The first call ends the stream gracefully (a write in flight goes out first); the reaper
// calls again each tick while the stream is still there, and a later call cancels it (a client
// that stops reading would otherwise hold its stream past the lifetime).
class BoundedStream {
 public:
  virtual void end(const grpc::Status& status) = 0;
  std::string connection, address;
  std::chrono::steady_clock::time_point ends_at;

 protected:
  ~BoundedStream() = default;
};

class StreamRegistry {
 public:
  // `kind` names the streams in refusal reasons ("health-watch" -> "health-watch-address-cap").
  StreamRegistry(StreamCaps caps, std::string kind);
  // Stops the reaper. Every stream must be gone (its server shut down) before.
  ~StreamRegistry();
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // Counts `stream` from gRPC's peer string ("ipv4:1.2.3.4:5678"), or says why not: the
  // refusal reason ("<kind>-total-cap", "-address-cap", "-connection-cap", "-stopping"), and
  // then nothing is counted.
  std::string admit(BoundedStream& stream, const std::string& peer);
  // A call whose request is in: no longer ended by the lifetime (the handler takes its time).
  void hold(BoundedStream& stream);
  // Its lifetime starts again from now (an answer the client must take in time).
  void renew(BoundedStream& stream);
  // The stream's OnDone: it is no longer counted (and no longer ended by the registry).
  void forget(BoundedStream& stream);
  // Ends every stream now and refuses new ones from now on.
  void end_all(const grpc::Status& status);
  // Calls f(stream) for every stream, under the registry's lock (streams stay alive).
  template <class F>
  void for_each(F&& f) {
    std::lock_guard lock(mutex_);
    for (auto* stream : streams_) f(*stream);
  }
  std::size_t open() const;

 private:
  void reap();
  const StreamCaps caps_;
  const std::string kind_;
  // Lock order: this, then a stream's own lock. gRPC runs a reactor's OnDone on its own
  // threads, never inside the StartWrite/Finish that end() makes (our reactors are not
  // inlineable), so a call made under this lock cannot re-enter forget().
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, refusing_ = false;
  std::set<BoundedStream*> streams_;
  std::map<std::string, std::size_t, std::less<>> per_address_, per_connection_;
  std::thread reaper_;
};

}  // namespace cgp::transport::detail

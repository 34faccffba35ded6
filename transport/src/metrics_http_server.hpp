// The HTTP server behind /metrics: Boost.Beast on one Asio thread. An idle
// socket costs a descriptor and a buffer, never a worker: prometheus-cpp's exposer (civetweb)
// gave each connection one of its 2 worker threads until civetweb's request timeout, so 200
// idle sockets held every scrape for over a minute. Here each connection must send its request
// within request_timeout, and connections beyond max_connections are closed at accept.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "cgp/common/expected.hpp"

namespace cgp::transport::detail {

class MetricsHttpServer {
 public:
  struct Limits {
    std::size_t max_connections = 256;
    std::chrono::milliseconds request_timeout{5000};  // to read a request, then idle keep-alive
  };
  // Serves GET (and HEAD) /metrics with `exposition()` (the text format, made at each scrape);
  // any other path is 404, any other method 405. `host` is a name or address, port 0 any free.
  // Errors name "metrics_listen".
  static Expected<std::unique_ptr<MetricsHttpServer>> start(
      const std::string& host, int port, Limits limits, std::function<std::string()> exposition);
  ~MetricsHttpServer();  // stops serving and joins its thread
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
  int port() const noexcept;

  struct State;

 private:
  explicit MetricsHttpServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cgp::transport::detail

// A static partition of [0, n) over threads: chunk t gets [t·n/T, (t+1)·n/T). Work assigned by
// index only, so results never depend on scheduling.
#pragma once

#include <cstddef>
#include <thread>
#include <vector>

namespace cgp::simulation {

template <class Body>  // Body(std::size_t begin, std::size_t end, unsigned thread_index)
void parallel_chunks(std::size_t n, unsigned threads, Body&& body) {
  if (threads <= 1 || n < 2048) {
    body(std::size_t{0}, n, 0u);
    return;
  }
  std::vector<std::jthread> workers;
  workers.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] { body(n * t / threads, n * (t + 1) / threads, t); });
  }
  body(std::size_t{0}, n / threads, 0u);
}

}  // namespace cgp::simulation

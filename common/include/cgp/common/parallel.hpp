// A static partition of [0, n) over threads: part t gets [t·n/T, (t+1)·n/T). Work is assigned
// by index only, so results never depend on scheduling. Used by the simulated fleets and by
// the query engine over fleets that take concurrent rounds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace cgp {

// body(begin, end, part) for each of min(threads, n / min_items) parts (at least one), the
// first on the calling thread. min_items keeps small jobs on one thread.
template <class Body>  // Body(std::size_t begin, std::size_t end, unsigned part)
void parallel_chunks(std::size_t n, unsigned threads, Body&& body, std::size_t min_items = 2048) {
  const std::size_t most = min_items ? n / min_items : n;
  const auto parts =
      static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(threads, most)));
  if (parts <= 1) {
    body(std::size_t{0}, n, 0u);
    return;
  }
  std::vector<std::jthread> workers;
  workers.reserve(parts - 1);
  for (unsigned t = 1; t < parts; ++t)
    workers.emplace_back([&, t] { body(n * t / parts, n * (t + 1) / parts, t); });
  body(std::size_t{0}, n / parts, 0u);
}

}  // namespace cgp

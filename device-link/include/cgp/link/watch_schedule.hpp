// The armed watches a self-ticking device serves (cgp-device's stream client and the swarm):
// each is ticked at the tick due now on its public schedule — ticks missed while the device was
// off or disconnected are skipped — until it alerts, finishes or fails. Not thread-safe: the
// owner serializes calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "cgp/common/watch.hpp"

namespace cgp::link {

class WatchSchedule {
 public:
  std::size_t size() const noexcept { return watches_.size(); }
  bool empty() const noexcept { return watches_.empty(); }
  // A watch to tick after `last_tick` (a new one, or resumed from the device's ledger).
  void add(const std::string& watch_id, WatchSpec spec, std::uint64_t last_tick) {
    watches_.insert_or_assign(watch_id, Scheduled{std::move(spec), last_tick});
  }

  // Calls tick(watch_id, k) for each watch whose due tick k is past its last one; tick returns
  // whether the watch goes on (it was silent). Watches that end, or pass their horizon, are
  // dropped. tick may release the owner's lock: watches added meanwhile are kept.
  template <class Tick>
  void tick_due(double now, Tick&& tick) {
    for (auto it = watches_.begin(); it != watches_.end();) {
      Scheduled& w = it->second;
      const std::uint64_t due = w.spec.tick_at(now);
      bool over = due > w.spec.horizon();
      if (!over && due > w.last_tick) {
        const bool goes_on = tick(it->first, due);
        w.last_tick = due;
        over = !goes_on;
      }
      it = over ? watches_.erase(it) : std::next(it);
    }
  }

  // When the next tick is due, and at least once a second (unix seconds).
  double next_due(double now) const {
    double next = now + 1.0;
    for (const auto& [id, w] : watches_)
      next = std::min(next, w.spec.params().start_unix_seconds +
                                static_cast<double>(w.last_tick) * w.spec.params().tick_seconds);
    return next;
  }

 private:
  struct Scheduled {
    WatchSpec spec;
    std::uint64_t last_tick = 0;
  };
  std::map<std::string, Scheduled> watches_;
};

}  // namespace cgp::link

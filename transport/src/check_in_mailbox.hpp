// Requests waiting for devices that are not connected (check-in fleets): a phone that
// connects only now and then gets, when it checks in, every request of a round still open for
// it. A request never sent is never charged, on the device or in the coordinator's mirror.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cgp/v1/cgp.pb.h"
#include "round_table.hpp"

namespace cgp::transport::detail {

class CheckInMailbox {
 public:
  struct Letter {
    std::weak_ptr<PendingRound> round;
    v1::CoordinatorToDevice message;
  };
  // Keeps `message` for `device_id` until it checks in or `round` closes.
  void post(const std::string& device_id, const std::shared_ptr<PendingRound>& round,
            v1::CoordinatorToDevice message);
  // Everything kept for `device_id`, taken out (the caller sends what its round still wants).
  std::vector<Letter> collect(const std::string& device_id);
  // Forgets the letters of rounds that have closed (called when a round closes).
  void sweep();

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<Letter>> letters_;
};

}  // namespace cgp::transport::detail

// The coordinator's own test fleet: devices reduced to what the engine sees of them, so that
// the engine's rules (what the mirror charges, whom it asks, what a report lists) are tested
// without the device SDK. Each user has a point and a budget; an answer is the exact statistic
// (no noise: the engine's arithmetic is checked exactly), charged privacy::device_charge(ρ) as a
// device would, refused when the charge does not fit. A user can be scripted to stay silent
// (no_answer: the reply was lost after the charge) or to be out of reach (not_delivered).
// Statistical behaviour under real noise is the simulation layer's to test (tests/simulation).
#pragma once

#include <span>
#include <stdexcept>
#include <vector>

#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::test {

class ScriptedFleet final : public coordinator::Fleet {
 public:
  enum class Behaviour { answers, silent_after_charge, out_of_reach };

  ScriptedFleet(std::vector<double> points, std::size_t dimension, double budget)
      : points_(std::move(points)),
        dimension_(dimension),
        budget_(budget),
        spent_(points_.size() / dimension, 0.0),
        behaviour_(spent_.size(), Behaviour::answers),
        asked_(spent_.size(), 0) {
    if (dimension == 0 || points_.size() % dimension != 0)
      throw std::invalid_argument("ScriptedFleet: points must be users × dimension");
  }

  std::size_t size() const noexcept override { return spent_.size(); }
  std::size_t dimension() const noexcept override { return dimension_; }
  double initial_budget() const noexcept override { return budget_; }

  void set(coordinator::UserId user, Behaviour behaviour) { behaviour_.at(user) = behaviour; }
  // What each user's filter has charged, as its ledger would say.
  double spent(coordinator::UserId user) const { return spent_.at(user); }
  // How many requests reached each user (not_delivered ones never did).
  std::size_t asked(coordinator::UserId user) const { return asked_.at(user); }
  std::size_t rounds() const noexcept { return rounds_; }
  // Requests a device refused because the charge did not fit (an engine in sync with its
  // mirror never sends one).
  std::size_t device_refusals() const noexcept { return refusals_; }

  void ask(const coordinator::RoundRequest& request, coordinator::RoundReplies& replies) override {
    ++rounds_;
    const std::size_t out_dim =
        request.statistic == StatisticKind::location ? dimension_ : std::size_t{1};
    replies.resize(request.users.size(), out_dim);
    for (std::size_t k = 0; k < request.users.size(); ++k) {
      const coordinator::UserId user = request.users[k];
      if (user >= size() || !(request.rho[k] > 0)) {
        replies.kind[k] = coordinator::ReplyKind::rejected;
        continue;
      }
      if (behaviour_[user] == Behaviour::out_of_reach) {
        replies.kind[k] = coordinator::ReplyKind::not_delivered;
        continue;
      }
      ++asked_[user];
      const double charge = privacy::device_charge(request.rho[k]);
      if (spent_[user] + charge > budget_) {
        replies.kind[k] = coordinator::ReplyKind::refused;
        replies.remaining[k] = budget_ - spent_[user];
        ++refusals_;
        continue;
      }
      spent_[user] += charge;  // charged before anything is released, as on a device
      if (behaviour_[user] == Behaviour::silent_after_charge) continue;  // stays no_answer
      replies.kind[k] = coordinator::ReplyKind::answered;
      replies.charged[k] = coordinator::Charge{charge};
      replies.remaining[k] = budget_ - spent_[user];
      statistic(request, user, replies.values.data() + k * out_dim);
    }
  }

 private:
  void statistic(const coordinator::RoundRequest& request, coordinator::UserId user,
                 double* out) const {
    const std::span<const double> x(points_.data() + user * dimension_, dimension_);
    switch (request.statistic) {
      case StatisticKind::location:
        std::copy(x.begin(), x.end(), out);
        return;
      case StatisticKind::distance_to_point:
        *out = geometry::euclidean_distance(x, request.point);
        return;
      case StatisticKind::signed_distance_to_region:
        *out = geometry::signed_distance(*request.region, x);
        return;
      default:
        throw std::logic_error("ScriptedFleet: a statistic the engine does not ask of locations");
    }
  }

  std::vector<double> points_;
  std::size_t dimension_;
  double budget_;
  std::vector<double> spent_;
  std::vector<Behaviour> behaviour_;
  std::vector<std::size_t> asked_;
  std::size_t rounds_ = 0;
  std::size_t refusals_ = 0;
};

}  // namespace cgp::test

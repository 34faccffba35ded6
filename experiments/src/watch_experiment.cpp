#include "cgp/experiments/watch_experiment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <thread>

#include "cgp/client/device.hpp"
#include "cgp/common/parallel.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/selection.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/watch.hpp"

namespace cgp::experiments {
namespace {

constexpr double kJitter = 10;  // metres: a visitor standing still
// Search ranges of the calibration: the per-metre ε of a Laplace watch, and 1/σ for the
// Gaussian ones (σ from 1 m to 100 km).
constexpr double kEpsilonLo = 1e-3, kEpsilonHi = 2;
constexpr double kInverseSigmaLo = 1e-5, kInverseSigmaHi = 1;
constexpr int kSearchSteps = 14;

double distance(const double* p, const std::array<double, 2>& site) {
  return std::hypot(p[0] - site[0], p[1] - site[1]);
}

// What a method produced for each user: the tick of its alert (0: none within the horizon).
using Alerts = std::vector<std::uint64_t>;

struct Rates {
  double false_alert = 0, miss = 0, delay = 0;
  std::size_t visitors = 0;
  bool meets(double quality) const { return false_alert <= quality && miss <= quality; }
};

// Each user's first tick within the radius (0: never, within the horizon): the truth the
// rates are scored against, the same for every noise level a calibration tries.
std::vector<std::uint64_t> entry_ticks(const Trajectories& paths, const Geofence& fence,
                                       std::uint64_t horizon) {
  std::vector<std::uint64_t> entry(paths.users, 0);
  for (std::size_t u = 0; u < paths.users; ++u)
    for (std::uint64_t t = 1; t <= horizon && entry[u] == 0; ++t)
      if (distance(paths.at(u, t), fence.site) <= fence.radius) entry[u] = t;
  return entry;
}

Rates rates_of(const Trajectories& paths, const Geofence& fence,
               const std::vector<std::uint64_t>& entries, const Alerts& alerts) {
  Rates r;
  std::size_t false_alerts = 0, misses = 0, detected = 0;
  double delay_sum = 0;
  for (std::size_t u = 0; u < paths.users; ++u) {
    const std::uint64_t entry = entries[u];
    const std::uint64_t a = alerts[u];
    const bool correct =
        a != 0 && distance(paths.at(u, a), fence.site) <= fence.radius + fence.band;
    if (a != 0 && !correct) ++false_alerts;
    if (entry == 0) continue;
    ++r.visitors;
    if (!correct) {
      ++misses;
    } else {
      ++detected;
      delay_sum += a > entry ? static_cast<double>(a - entry) : 0.0;
    }
  }
  r.false_alert = static_cast<double>(false_alerts) / static_cast<double>(paths.users);
  r.miss = r.visitors ? static_cast<double>(misses) / static_cast<double>(r.visitors) : 0.0;
  r.delay = detected ? delay_sum / static_cast<double>(detected) : 0.0;
  return r;
}

// Runs body(user) for every user on the machine's threads (each user is independent).
template <class Body>
void for_users(std::size_t users, Body&& body) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  parallel_chunks(
      users, threads,
      [&](std::size_t begin, std::size_t end, unsigned) {
        for (std::size_t u = begin; u < end; ++u) body(u);
      },
      1);
}

Expected<WatchSpec> laplace_spec(const Geofence& fence, std::uint64_t horizon, double epsilon) {
  WatchSpecParams p;
  p.watch_id = "geofence";
  p.component_id = "location";
  p.statistic = StatisticKind::distance_to_point;
  p.point = {fence.site[0], fence.site[1]};
  p.threshold = fence.threshold();
  p.clamp_lo = 0;
  p.clamp_hi = fence.clamp;
  p.trigger = WatchTrigger::at_or_below;
  p.horizon = horizon;
  p.noise = WatchNoise::laplace;
  p.epsilon = epsilon;
  return WatchSpec::create(std::move(p));
}

// The Laplace watch as devices run it: a real client::Device per user (seeded simulation
// randomness, memory ledger), armed once, ticked at every tick on the user's position.
Expected<Alerts> laplace_alerts(const Trajectories& paths, const Geofence& fence,
                                std::uint64_t horizon, double epsilon, std::uint64_t seed) {
  CGP_ASSIGN_OR_RETURN(WatchSpec spec, laplace_spec(fence, horizon, epsilon));
  CGP_ASSIGN_OR_RETURN(DeviceConfig config,
                       DeviceConfig::cgp(2 * laplace_watch_charge(epsilon) + 1e-9));
  Alerts alerts(paths.users, 0);
  std::vector<Error> errors(paths.users);
  std::vector<char> failed(paths.users, 0);
  for_users(paths.users, [&](std::size_t u) {
    auto device = client::Device::open_for_simulation(config, seed, u);
    auto fail = [&](Error e) {
      errors[u] = std::move(e);
      failed[u] = 1;
    };
    if (auto s = device.register_component("location", 2, "m"); !s) return fail(s.error());
    auto armed = device.start_watch(spec);
    if (!armed) return fail(armed.error());
    if (armed->status != client::WatchStartStatus::armed)
      return fail(make_error(ErrorCode::internal_error, "epsilon", "the watch was refused"));
    for (std::uint64_t t = 1; t <= horizon; ++t) {
      const double* p = paths.at(u, t);
      if (auto s = device.set_component("location", std::span(p, 2)); !s) return fail(s.error());
      auto status = device.tick_watch("geofence", t);
      if (!status) return fail(status.error());
      if (*status == WatchTickStatus::alert) {
        alerts[u] = t;
        return;
      }
    }
  });
  for (std::size_t u = 0; u < paths.users; ++u)
    if (failed[u]) return errors[u];
  return alerts;
}

// The coordinator's alternative: every device releases its distance to the site with N(0, σ²)
// at every tick (a real device's release, charged 1/(2σ²) each), and the coordinator alerts at
// the first release at or below the threshold.
Expected<Alerts> release_alerts(const Trajectories& paths, const Geofence& fence,
                                std::uint64_t horizon, double sigma, std::uint64_t seed) {
  const double rho = 1 / (2 * sigma * sigma);
  const double total = static_cast<double>(horizon) * privacy::device_charge(rho);
  CGP_ASSIGN_OR_RETURN(DeviceConfig config, DeviceConfig::cgp(total * 1.01 + 1e-12));
  std::vector<DeviceRequest> requests;
  for (std::uint64_t t = 1; t <= horizon; ++t) {
    CGP_ASSIGN_OR_RETURN(
        auto request, DeviceRequest::distance_to_point({"tick-" + std::to_string(t), 1}, "location",
                                                       {fence.site[0], fence.site[1]}, rho));
    requests.push_back(std::move(request));
  }
  Alerts alerts(paths.users, 0);
  std::vector<Error> errors(paths.users);
  std::vector<char> failed(paths.users, 0);
  for_users(paths.users, [&](std::size_t u) {
    auto device = client::Device::open_for_simulation(config, seed, u);
    if (auto s = device.register_component("location", 2, "m"); !s) {
      errors[u] = s.error();
      failed[u] = 1;
      return;
    }
    for (std::uint64_t t = 1; t <= horizon; ++t) {
      (void)device.set_component("location", std::span(paths.at(u, t), 2));
      const client::Reply reply = device.handle(requests[t - 1]);
      if (reply.status != ReplyStatus::answered) {
        errors[u] = reply.status == ReplyStatus::rejected_invalid
                        ? reply.error
                        : make_error(ErrorCode::internal_error, "sigma", "a release was refused");
        failed[u] = 1;
        return;
      }
      if (reply.values[0] <= fence.threshold()) {
        alerts[u] = t;
        return;
      }
    }
  });
  for (std::size_t u = 0; u < paths.users; ++u)
    if (failed[u]) return errors[u];
  return alerts;
}

// Gaussian Above Threshold (000 Alg. 3) with continuous noise, as 000 analyses it: threshold
// noise X ~ N(0, σ²) once, query noise N(0, 3σ²) per tick; alert at the first tick whose noisy
// clamped distance is at or below threshold + X. Devices do not run it yet (they refuse
// gaussian_expost by name); its cost is the accountant's worst per-metre ex-post ε.
Alerts expost_alerts(const Trajectories& paths, const Geofence& fence, std::uint64_t horizon,
                     double sigma, std::uint64_t seed) {
  Alerts alerts(paths.users, 0);
  const double query_sigma = std::sqrt(3.0) * sigma;
  for_users(paths.users, [&](std::size_t u) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + u);
    std::normal_distribution<double> normal(0, 1);
    const double noisy_threshold = fence.threshold() + sigma * normal(rng);
    for (std::uint64_t t = 1; t <= horizon; ++t) {
      const double score = std::clamp(distance(paths.at(u, t), fence.site), 0.0, fence.clamp);
      if (score + query_sigma * normal(rng) <= noisy_threshold) {
        alerts[u] = t;
        return;
      }
    }
  });
  return alerts;
}

struct Evaluation {
  Rates rates;
  double noise = 0;
};

// The cheapest setting that meets the quality: bisection on log x, where a larger x is less
// noise (ε for Laplace, 1/σ for the Gaussian methods). The same seed at every step (common
// random numbers), so the rates move with the noise scale only.
template <class Evaluate>
Expected<std::pair<Evaluation, bool>> calibrate(double lo, double hi, double quality,
                                                Evaluate&& evaluate) {
  CGP_ASSIGN_OR_RETURN(Rates at_hi, evaluate(hi));
  if (!at_hi.meets(quality)) return std::pair{Evaluation{at_hi, hi}, false};
  Evaluation best{at_hi, hi};
  for (int i = 0; i < kSearchSteps; ++i) {
    const double mid = std::sqrt(lo * hi);
    CGP_ASSIGN_OR_RETURN(Rates rates, evaluate(mid));
    if (rates.meets(quality)) {
      hi = mid;
      best = {rates, mid};
    } else {
      lo = mid;
    }
  }
  return std::pair{best, true};
}

Status check(const WatchSettings& s) {
  if (s.horizons.empty())
    return make_error(ErrorCode::missing_field, "ticks", "--ticks needs at least one horizon");
  for (auto h : s.horizons)
    if (h == 0 || h > 100'000)
      return make_error(ErrorCode::out_of_range, "ticks",
                        "--ticks values must lie in [1, 100000], got " + std::to_string(h));
  for (const auto& m : s.methods)
    if (m != "laplace" && m != "gaussian_expost" && m != "gaussian_releases")
      return make_error(
          ErrorCode::invalid_argument, "methods",
          "--methods takes laplace, gaussian_expost, gaussian_releases; got '" + m + "'");
  CGP_RETURN_IF_ERROR(require_finite_positive("radius", s.fence.radius));
  CGP_RETURN_IF_ERROR(require_finite_positive("band", s.fence.band));
  CGP_RETURN_IF_ERROR(require_finite_positive("clamp", s.fence.clamp));
  if (!(s.fence.clamp > s.fence.threshold()))
    return make_error(ErrorCode::out_of_range, "clamp",
                      "--clamp must exceed radius + band/2 (" + format_number(s.fence.threshold()) +
                          "), got " + format_number(s.fence.clamp));
  CGP_RETURN_IF_ERROR(require_open_interval("quality", s.quality, 0.0, 0.5));
  CGP_RETURN_IF_ERROR(require_finite_positive("step", s.step));
  if (s.users < 2 || s.users > 10'000'000)
    return make_error(ErrorCode::out_of_range, "users",
                      "--users must lie in [2, 10000000], got " + std::to_string(s.users));
  return {};
}

}  // namespace

Trajectories synthetic_trajectories(std::size_t users, std::uint64_t ticks, const Geofence& fence,
                                    double step, std::uint64_t seed) {
  Trajectories out;
  out.users = users;
  out.ticks = ticks;
  out.xy.resize(2 * users * ticks);
  out.description = "built-in movers: " + std::to_string(users) + " users, " +
                    std::to_string(ticks) + " ticks, " + format_number(step) +
                    " m per tick (half visitors, half passers-by)";
  for (std::size_t u = 0; u < users; ++u) {
    std::mt19937_64 rng(seed ^ (0xD1B54A32D192ED03ULL * (u + 1)));
    std::uniform_real_distribution<double> unit(0, 1);
    std::normal_distribution<double> jitter(0, kJitter);
    const double heading = 2 * std::numbers::pi * unit(rng);
    const double dx = std::cos(heading), dy = std::sin(heading);
    const double angle = 2 * std::numbers::pi * unit(rng);
    const auto tick_span = static_cast<double>(ticks);
    if (u % 2 == 0) {  // a visitor: walks in along `heading`, stops within radius/2, stays
      const double stop = fence.radius / 2 * std::sqrt(unit(rng));
      const double fx = fence.site[0] + stop * std::cos(angle),
                   fy = fence.site[1] + stop * std::sin(angle);
      const double arrival = std::floor(tick_span / 4 + unit(rng) * tick_span / 2) + 1;
      for (std::uint64_t t = 1; t <= ticks; ++t) {
        double* p = &out.xy[2 * (u * ticks + t - 1)];
        const double left = arrival - static_cast<double>(t);
        p[0] = left > 0 ? fx - dx * left * step : fx + jitter(rng);
        p[1] = left > 0 ? fy - dy * left * step : fy + jitter(rng);
      }
    } else {  // a passer-by: a straight line, closest approach beyond radius + band
      const double closest = fence.radius + fence.band + 2 * fence.band * unit(rng);
      const double cx = fence.site[0] + closest * std::cos(angle),
                   cy = fence.site[1] + closest * std::sin(angle);
      const double px = -std::sin(angle), py = std::cos(angle);  // along the line
      const double crossing = std::floor(unit(rng) * tick_span) + 1;
      for (std::uint64_t t = 1; t <= ticks; ++t) {
        double* p = &out.xy[2 * (u * ticks + t - 1)];
        const double along = (static_cast<double>(t) - crossing) * step;
        p[0] = cx + px * along;
        p[1] = cy + py * along;
      }
    }
  }
  return out;
}

Expected<Trajectories> load_trajectories(const std::string& path, std::uint64_t ticks) {
  std::ifstream in(path);
  if (!in)
    return make_error(ErrorCode::invalid_argument, "trajectories",
                      "--trajectories: cannot read '" + path + "'");
  std::map<std::string, std::size_t> index;
  std::vector<std::map<std::uint64_t, std::array<double, 2>>> points;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string id, t_text, x_text, y_text;
    std::getline(fields, id, ',');
    std::getline(fields, t_text, ',');
    std::getline(fields, x_text, ',');
    std::getline(fields, y_text, ',');
    auto bad = [&](const std::string& why) {
      return make_error(ErrorCode::invalid_argument, "trajectories",
                        "--trajectories: " + path + " line " + std::to_string(number) + ": " + why);
    };
    double t = 0, x = 0, y = 0;
    try {
      std::size_t used = 0;
      t = std::stod(t_text, &used);
      x = std::stod(x_text);
      y = std::stod(y_text);
    } catch (...) {
      if (number == 1) continue;  // a header
      return bad("expected id,t,x,y with numbers");
    }
    if (!(std::isfinite(x) && std::isfinite(y) && std::fabs(x) < 1e9 && std::fabs(y) < 1e9))
      return bad("x and y must be finite metres below 1e9");
    if (!(t >= 1 && t == std::floor(t) && t <= 1e9)) return bad("t must be a tick index >= 1");
    if (t > static_cast<double>(ticks)) continue;
    auto [it, fresh] = index.emplace(id, points.size());
    if (fresh) points.emplace_back();
    points[it->second][static_cast<std::uint64_t>(t)] = {x, y};
  }
  if (points.size() < 2)
    return make_error(ErrorCode::invalid_argument, "trajectories",
                      "--trajectories: " + path + " has fewer than two users within the horizon");
  Trajectories out;
  out.users = points.size();
  out.ticks = ticks;
  out.xy.resize(2 * out.users * ticks);
  for (std::size_t u = 0; u < out.users; ++u) {
    std::array<double, 2> last = points[u].begin()->second;
    for (std::uint64_t t = 1; t <= ticks; ++t) {
      if (auto it = points[u].find(t); it != points[u].end()) last = it->second;
      out.xy[2 * (u * ticks + t - 1)] = last[0];
      out.xy[2 * (u * ticks + t - 1) + 1] = last[1];
    }
  }
  out.description =
      path + ": " + std::to_string(out.users) + " users, " + std::to_string(ticks) + " ticks";
  return out;
}

Expected<std::vector<WatchRow>> run_watch(const WatchSettings& settings) {
  CGP_RETURN_IF_ERROR(check(settings));
  const std::uint64_t longest =
      *std::max_element(settings.horizons.begin(), settings.horizons.end());
  Trajectories paths;
  if (!settings.trajectories.empty()) {
    CGP_ASSIGN_OR_RETURN(paths, load_trajectories(settings.trajectories, longest));
  }
  std::vector<WatchRow> rows;
  for (std::uint64_t horizon : settings.horizons) {
    // Built-in movers are made for each horizon (visitors arrive within it).
    if (settings.trajectories.empty())
      paths = synthetic_trajectories(settings.users, horizon, settings.fence, settings.step,
                                     settings.seed);
    for (const std::string& method : settings.methods) {
      const auto start = std::chrono::steady_clock::now();
      WatchRow row;
      row.method = method;
      row.horizon = horizon;
      row.users = paths.users;
      const auto entries = entry_ticks(paths, settings.fence, horizon);
      auto rates_for = [&](auto alerts) -> Expected<Rates> {
        if (!alerts) return alerts.error();
        return rates_of(paths, settings.fence, entries, *alerts);
      };
      Expected<std::pair<Evaluation, bool>> found = std::pair{Evaluation{}, false};
      if (method == "laplace") {
        found = calibrate(kEpsilonLo, kEpsilonHi, settings.quality, [&](double eps) {
          return rates_for(laplace_alerts(paths, settings.fence, horizon, eps, settings.seed));
        });
        if (!found) return found.error();
        row.noise = found->first.noise;
        row.epsilon_per_metre = row.noise;
        row.rho = laplace_watch_charge(row.noise);
      } else if (method == "gaussian_releases") {
        found = calibrate(kInverseSigmaLo, kInverseSigmaHi, settings.quality, [&](double inv) {
          return rates_for(release_alerts(paths, settings.fence, horizon, 1 / inv, settings.seed));
        });
        if (!found) return found.error();
        row.noise = 1 / found->first.noise;
        row.epsilon_per_metre = NAN;  // Gaussian releases have no pure ε
        row.rho =
            static_cast<double>(horizon) * privacy::device_charge(1 / (2 * row.noise * row.noise));
      } else {
        found = calibrate(kInverseSigmaLo, kInverseSigmaHi, settings.quality, [&](double inv) {
          return Expected<Rates>(
              rates_of(paths, settings.fence, entries,
                       expost_alerts(paths, settings.fence, horizon, 1 / inv, settings.seed)));
        });
        if (!found) return found.error();
        row.noise = 1 / found->first.noise;
        // Alerting at or below θ is Above Threshold on q = −clamped distance ∈ [−clamp, 0].
        const privacy::GaussianAboveThreshold at{row.noise, std::sqrt(3.0) * row.noise,
                                                 -settings.fence.clamp, 0,
                                                 -settings.fence.threshold()};
        CGP_ASSIGN_OR_RETURN(row.epsilon_per_metre, privacy::gaussian_at_worst_slope(at, horizon));
        row.rho = 0;
      }
      row.reached = found->second;
      row.false_alert = found->first.rates.false_alert;
      row.miss = found->first.rates.miss;
      row.delay = found->first.rates.delay;
      row.visitors = found->first.rates.visitors;
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rows.push_back(row);
    }
  }
  return rows;
}

void print_watch_table(std::FILE* out, const std::vector<WatchRow>& rows) {
  std::fprintf(out, "%-18s %6s %8s %10s %12s %11s %7s %7s %7s %8s\n", "method", "ticks", "reached",
               "noise", "eps/metre", "rho/m^2", "false", "miss", "delay", "seconds");
  for (const WatchRow& r : rows) {
    char eps[32];
    if (std::isnan(r.epsilon_per_metre))
      std::snprintf(eps, sizeof eps, "%s", "-");
    else
      std::snprintf(eps, sizeof eps, "%.4g", r.epsilon_per_metre);
    std::fprintf(out, "%-18s %6llu %8s %10.4g %12s %11.3g %7.3f %7.3f %7.2f %8.1f\n",
                 r.method.c_str(), static_cast<unsigned long long>(r.horizon),
                 r.reached ? "yes" : "no", r.noise, eps, r.rho, r.false_alert, r.miss, r.delay,
                 r.seconds);
  }
}

Status write_watch_json(const std::string& path, const std::vector<WatchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const WatchRow& r : rows)
    out.push_back(
        {{"method", r.method},
         {"ticks", r.horizon},
         {"users", r.users},
         {"visitors", r.visitors},
         {"reached", r.reached},
         {"noise", r.noise},
         {"epsilon_per_metre",
          std::isnan(r.epsilon_per_metre) ? nlohmann::json() : nlohmann::json(r.epsilon_per_metre)},
         {"rho", r.rho},
         {"false_alert", r.false_alert},
         {"miss", r.miss},
         {"delay", r.delay},
         {"seconds", r.seconds}});
  std::ofstream file(path);
  if (!file || !(file << out.dump(2) << "\n"))
    return make_error(ErrorCode::invalid_argument, "json", "--json: cannot write '" + path + "'");
  return {};
}

}  // namespace cgp::experiments

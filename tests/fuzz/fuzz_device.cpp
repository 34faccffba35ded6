// libFuzzer harness for the device's request path: the C ABI (cgp_device_handle with a fuzzed
// reply buffer size) and the C++ wire path (Device::handle), fed the same bytes.
//
// Input: [2 bytes: reply capacity selector, little-endian u16] [serialized cgp.v1.DeviceRequest]
//   capacity = selector % 8193 bytes, allocated exactly (new[]) so that ASan sees any overflow;
//   with capacity 0 and an odd first byte the reply pointer is NULL.
// make_corpus.cpp writes seeds in this format.
//
// One long-lived device of each kind per process (state carries across inputs, as on a phone):
//   C ABI:  cgp_device_open(NULL, {filter: CGP, budget: 1}) — secure randomness, ledger in memory
//   C++:    Device::open_for_simulation(cgp(1)), seeded
// both with "location" (2-D) and "v" (8-D) set once; the C++ device also has "unset" (3-D),
// registered but never set. After every call the harness checks, and traps on a violation:
//   (a) budget: 0 ≤ remaining ≤ budget; Σ charged_rho of fresh answers ≤ budget;
//       a fresh answer charges exactly privacy::device_charge(ρ) and spent grows by at least that
//   (b) no answer ⇒ no charge: a refusal, a rejection, CGP_BUFFER_TOO_SMALL (or any non-OK
//       status) leaves the remaining budget (and the spent total) unchanged
//   (c) same id ⇒ same bytes: an ANSWERED (query_id, round) seen before in this device's life
//       is byte-identical to its first answer and charges nothing; every fresh answer is also
//       replayed at once (so the property is checked within one input, reproducibly)
//   (d) buffers: reply_len ≤ capacity; CGP_BUFFER_TOO_SMALL reports a needed length > capacity,
//       and a buffer of exactly that length then succeeds; the only statuses are OK and
//       CGP_BUFFER_TOO_SMALL (an invalid request is a REJECTED_INVALID reply, not an error)
//   (e) replies parse as cgp.v1.DeviceReply, with a known status, the budget the device reports,
//       and (when answered) finite values of the statistic's dimension; Device::handle never
//       throws.
// Memory stays bounded: the devices (their ledgers in memory) and the id maps are reset together
// after kMaxAnswers fresh answers, or when the budget is (nearly) used up: under kResetBelow
// left, or kMaxRefusals budget refusals since the last answer (so the release path keeps being
// reached). The invariants hold per device lifetime. Because the devices keep state across
// inputs, a finding may depend on earlier inputs; the immediate replay makes (c) checkable
// within one input, and a crash input usually reproduces alone (replay it to confirm).
#include <cgp/cgp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cgp/client/device.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/common/wire/limits.hpp"

namespace {

constexpr double kBudget = 1.0;
constexpr std::size_t kMaxCapacity = 8192;
constexpr std::size_t kMaxAnswers = 10000;  // per device lifetime (bounds ledgers and maps)
constexpr double kResetBelow = 1e-9;        // reset when this much budget is left,
constexpr std::size_t kMaxRefusals = 2000;  // or after this many refusals without an answer
constexpr int kInternalErrorCode = 19;      // cgp.v1.ErrorCode INTERNAL_ERROR

const double kLocation[2] = {100.0, -50.0};
const double kVector[8] = {1.5, -2.25, 0.0, 1e3, -7.0, 3.0, 0.125, 42.0};

[[noreturn]] void violation(const char* what, const char* detail = "") {
  std::fprintf(stderr, "\n*** cgp fuzz invariant violated: %s %s\n", what, detail);
  std::fflush(stderr);
  __builtin_trap();
}

#define CHECK(cond, what)                        \
  do {                                           \
    if (!(cond)) violation(what, "(" #cond ")"); \
  } while (0)

using Key = std::pair<std::string, std::uint32_t>;

// The dimension of a component on these devices (0: unknown on this device).
std::size_t component_dimension(const std::string& id, bool simulated) {
  if (id == "location") return 2;
  if (id == "v") return 8;
  if (simulated && id == "unset") return 3;
  return 0;
}

std::string config_bytes() {
  cgp::v1::DeviceConfig config;
  config.set_filter(cgp::v1::CGP);
  config.set_budget(kBudget);
  return cgp::wire::serialize(config);
}

// What one device's reply must satisfy, given the request it answered and the budget movement.
// Shared by both devices. `remaining_after`/`remaining_before` are the device's own numbers.
struct Books {
  std::map<Key, std::string> answers;  // first answer bytes of each answered id
  long double charged = 0;             // Σ charged_rho of fresh answers
  std::size_t fresh = 0;
  std::size_t refusals_in_a_row = 0;  // REFUSED_BUDGET since the last fresh answer

  void clear() {
    answers.clear();
    charged = 0;
    fresh = 0;
    refusals_in_a_row = 0;
  }

  // Returns whether the reply was a fresh answer (a charge).
  bool check_reply(const std::string& bytes, const std::optional<cgp::v1::DeviceRequest>& request,
                   double before, double after, bool simulated) {
    auto parsed = cgp::wire::parse_device_reply(
        {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
    CHECK(parsed.has_value(), "(e) the reply does not parse as cgp.v1.DeviceReply");
    const cgp::v1::DeviceReply& reply = *parsed;
    CHECK(after >= 0 && after <= kBudget, "(a) remaining budget out of [0, budget]");
    CHECK(kBudget - after >= 0 && kBudget - after <= kBudget, "(a) spent out of [0, budget]");
    switch (reply.status()) {
      case cgp::v1::ANSWERED:
        break;
      case cgp::v1::REFUSED_BUDGET:
      case cgp::v1::REJECTED_INVALID:
        if (reply.status() == cgp::v1::REFUSED_BUDGET) ++refusals_in_a_row;
        CHECK(after == before, "(b) a refused or rejected request changed the budget");
        CHECK(reply.charged_rho() == 0, "(b) a refused or rejected reply says it charged");
        CHECK(reply.values_size() == 0, "(b) a refused or rejected reply carries values");
        CHECK(reply.remaining_budget() == after, "(e) reply.remaining_budget != device's");
        CHECK((reply.status() == cgp::v1::REJECTED_INVALID) == (reply.error() != cgp::v1::OK),
              "(e) error code set iff REJECTED_INVALID");
        // INTERNAL_ERROR (19, where the protocol has it) is an exception or other unexpected
        // failure that the device caught: a bug, even though nothing was charged.
        CHECK(static_cast<int>(reply.error()) != kInternalErrorCode,
              "(e) the device replied INTERNAL_ERROR (an unexpected failure inside it)");
        return false;
      default:
        violation("(e) reply status is not ANSWERED, REFUSED_BUDGET or REJECTED_INVALID");
    }

    // ANSWERED: the request must have parsed and its id is the reply's id.
    CHECK(request.has_value(), "(e) ANSWERED a request that does not parse");
    CHECK(reply.id().query_id() == request->id().query_id() &&
              reply.id().round() == request->id().round(),
          "(e) ANSWERED with another id than the request's");
    Key key{reply.id().query_id(), reply.id().round()};
    if (auto seen = answers.find(key); seen != answers.end()) {
      CHECK(seen->second == bytes, "(c) same id answered with different bytes");
      CHECK(after == before, "(c) a replayed answer charged again");
      return false;
    }
    // A fresh answer.
    const double charge = reply.charged_rho();
    CHECK(std::isfinite(charge) && charge > 0, "(a) an answer charged nothing or non-finite");
    CHECK(charge == cgp::privacy::device_charge(request->rho()),
          "(a) charged_rho != privacy::device_charge(rho)");
    CHECK(charge >= request->rho(), "(a) charged less than the rho asked for");
    CHECK(after <= before, "(a) an answer increased the remaining budget");
    CHECK(reply.remaining_budget() == after, "(e) answered reply.remaining_budget != device's");
    charged += charge;
    CHECK(charged <= static_cast<long double>(kBudget) * (1 + 1e-12L),
          "(a) sum of charged_rho exceeds the budget");
    std::size_t dim = 1;
    if (request->has_location()) dim = component_dimension(request->component_id(), simulated);
    CHECK(dim != 0, "(e) ANSWERED for a component the device does not have");
    CHECK(static_cast<std::size_t>(reply.values_size()) == dim,
          "(e) answered with the wrong number of values");
    for (double v : reply.values()) CHECK(std::isfinite(v), "(e) answered a non-finite value");
    answers.emplace(std::move(key), bytes);
    ++fresh;
    refusals_in_a_row = 0;
    return true;
  }
};

bool verbose = false;  // CGP_FUZZ_VERBOSE=1: one line per reply (for checking seeds)

void describe(const char* device, const std::string& bytes) {
  auto reply = cgp::wire::parse_device_reply(
      {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  if (!reply) return;
  std::fprintf(stderr, "%s: (%s, %u) %s %s %s charged=%g remaining=%g values=%d\n", device,
               reply->id().query_id().c_str(), reply->id().round(),
               cgp::v1::ReplyStatus_Name(reply->status()).c_str(),
               cgp::v1::ErrorCode_Name(reply->error()).c_str(), reply->error_message().c_str(),
               reply->charged_rho(), reply->remaining_budget(), reply->values_size());
}

struct Harness {
  cgp_device* device = nullptr;
  std::optional<cgp::client::Device> simulated;
  Books c_books, sim_books;
  std::uint64_t epoch = 0;

  Harness() { open(); }
  ~Harness() { cgp_device_close(device); }

  void open() {
    cgp_device_close(device);
    device = nullptr;
    const std::string config = config_bytes();
    int rc = cgp_device_open(nullptr, reinterpret_cast<const std::uint8_t*>(config.data()),
                             config.size(), &device);
    if (rc != CGP_OK) violation("setup: cgp_device_open failed", cgp_device_last_error(nullptr));
    if (cgp_device_set_component(device, "location", kLocation, 2) != CGP_OK ||
        cgp_device_set_component(device, "v", kVector, 8) != CGP_OK)
      violation("setup: cgp_device_set_component failed", cgp_device_last_error(device));

    auto sim_config = cgp::DeviceConfig::cgp(kBudget);
    if (!sim_config) violation("setup: DeviceConfig::cgp failed");
    simulated.emplace(cgp::client::Device::open_for_simulation(*sim_config, 20240611, epoch));
    if (!simulated->register_component("location", 2).ok() ||
        !simulated->set_component("location", kLocation).ok() ||
        !simulated->register_component("v", 8).ok() ||
        !simulated->set_component("v", kVector).ok() ||
        !simulated->register_component("unset", 3).ok())
      violation("setup: simulated device components");
    c_books.clear();
    sim_books.clear();
    ++epoch;
  }

  double c_remaining() const {
    double out = -1;
    if (cgp_device_remaining(device, &out) != CGP_OK) violation("cgp_device_remaining failed");
    CHECK(std::isfinite(out), "(a) remaining is not finite");
    return out;
  }

  // One cgp_device_handle call with a reply buffer of exactly `capacity` bytes (NULL if asked).
  // Returns the reply bytes when the call succeeded.
  std::optional<std::string> c_call(std::span<const std::uint8_t> request, std::size_t capacity,
                                    bool null_reply, std::size_t* needed) {
    const double before = c_remaining();
    std::unique_ptr<std::uint8_t[]> buffer;
    if (!null_reply) buffer.reset(new std::uint8_t[capacity]);
    std::size_t reply_len = static_cast<std::size_t>(-1);
    const int rc = cgp_device_handle(device, request.empty() ? nullptr : request.data(),
                                     request.size(), buffer.get(), capacity, &reply_len);
    const double after = c_remaining();
    CHECK(after >= 0 && after <= kBudget, "(a) remaining budget out of [0, budget]");
    if (rc == CGP_BUFFER_TOO_SMALL) {
      CHECK(reply_len != static_cast<std::size_t>(-1), "(d) BUFFER_TOO_SMALL without a length");
      CHECK(reply_len > capacity || null_reply, "(d) BUFFER_TOO_SMALL but needed <= capacity");
      CHECK(after == before, "(b) BUFFER_TOO_SMALL changed the budget");
      *needed = reply_len;
      return std::nullopt;
    }
    if (rc != CGP_OK) {
      std::fprintf(stderr, "cgp_device_handle: %d (%s): %s\n", rc, cgp_status_name(rc),
                   cgp_device_last_error(device));
      CHECK(after == before, "(b) a failed cgp_device_handle changed the budget");
      violation("(d) cgp_device_handle returned neither OK nor BUFFER_TOO_SMALL");
    }
    CHECK(!null_reply, "(d) OK with a NULL reply buffer");
    CHECK(reply_len <= capacity, "(d) reply_len exceeds the capacity given");
    return std::string(reinterpret_cast<const char*>(buffer.get()), reply_len);
  }

  void run_c(std::span<const std::uint8_t> request, std::size_t capacity, bool null_reply,
             const std::optional<cgp::v1::DeviceRequest>& parsed) {
    const double before = c_remaining();
    std::size_t needed = 0;
    auto reply = c_call(request, capacity, null_reply, &needed);
    if (!reply) {
      // Nothing happened; a buffer of exactly the needed length must now do.
      CHECK(needed <= cgp::wire::kMaxMessageBytes, "(d) absurd needed reply length");
      reply = c_call(request, needed, false, &needed);
      CHECK(reply.has_value(), "(d) BUFFER_TOO_SMALL again with the needed length");
    }
    const double after = c_remaining();
    if (verbose) describe("c_abi", *reply);
    if (c_books.check_reply(*reply, parsed, before, after, false)) {
      // Replay the fresh answer at once: identical bytes, no charge, into an exact buffer.
      std::size_t replay_needed = 0;
      auto again = c_call(request, reply->size(), false, &replay_needed);
      if (!again) {  // the bound may exceed this reply's size; use it
        again = c_call(request, replay_needed, false, &replay_needed);
        CHECK(again.has_value(), "(d) BUFFER_TOO_SMALL again with the needed length");
      }
      CHECK(*again == *reply, "(c) immediate replay returned different bytes");
      CHECK(c_remaining() == after, "(c) immediate replay charged again");
    }
  }

  void run_simulated(std::span<const std::uint8_t> request,
                     const std::optional<cgp::v1::DeviceRequest>& parsed) {
    cgp::client::Device& d = *simulated;
    const double before = d.remaining();
    const double spent_before = d.spent();
    std::string reply;
    try {
      reply = d.handle(request);
    } catch (...) {
      violation("(e) Device::handle threw");
    }
    const double after = d.remaining();
    const double spent_after = d.spent();
    CHECK(spent_after >= 0 && spent_after <= kBudget, "(a) Device::spent out of [0, budget]");
    if (verbose) describe("c++  ", reply);
    auto max = d.max_reply_size(request);
    CHECK(max.has_value() && reply.size() <= *max, "(d) reply longer than max_reply_size");
    if (sim_books.check_reply(reply, parsed, before, after, true)) {
      // spent grows by at least the charge (the filter rounds up).
      auto r = cgp::wire::parse_device_reply(
          {reinterpret_cast<const std::uint8_t*>(reply.data()), reply.size()});
      CHECK(spent_after >= spent_before + r->charged_rho(), "(a) spent grew by less than charged");
      std::string again;
      try {
        again = d.handle(request);
      } catch (...) {
        violation("(e) Device::handle threw on a replay");
      }
      CHECK(again == reply, "(c) immediate replay returned different bytes (C++)");
      CHECK(d.spent() == spent_after, "(c) immediate replay charged again (C++)");
    } else {
      CHECK(spent_after == spent_before, "(b) no fresh answer, but Device::spent changed");
    }
  }

  void maybe_reset() {
    if (c_books.fresh >= kMaxAnswers || sim_books.fresh >= kMaxAnswers ||
        c_books.refusals_in_a_row >= kMaxRefusals || sim_books.refusals_in_a_row >= kMaxRefusals ||
        c_remaining() < kResetBelow || simulated->remaining() < kResetBelow)
      open();
  }
};

Harness* harness = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* v = std::getenv("CGP_FUZZ_VERBOSE");
  verbose = v && *v && *v != '0';
  // Invalid UTF-8 in string fields is routine here; protobuf would log every one.
  if (!verbose) google::protobuf::SetLogHandler(nullptr);
  harness = new Harness();  // lives for the whole process
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return -1;  // not added to the corpus
  const unsigned selector = data[0] | (unsigned{data[1]} << 8);
  const std::size_t capacity = selector % (kMaxCapacity + 1);
  const bool null_reply = capacity == 0 && (data[0] & 1) != 0;
  std::span<const std::uint8_t> request(data + 2, size - 2);

  std::optional<cgp::v1::DeviceRequest> parsed;
  if (auto p = cgp::wire::parse_device_request(request)) parsed = std::move(*p);

  harness->run_c(request, capacity, null_reply, parsed);
  harness->run_simulated(request, parsed);
  harness->maybe_reset();
  return 0;
}

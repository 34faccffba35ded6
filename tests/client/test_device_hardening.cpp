// The device's guarantee against a malicious coordinator and a careless app. Each test
// names the item it covers; each failed on 51cfbc1.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "cgp/client/device.hpp"
#include "cgp/client/privatizer.hpp"
#include "cgp/common/geometry/location_frame.hpp"
#include "cgp/common/geometry/signed_distance.hpp"
#include "cgp/common/wire/codec.hpp"
#include "device_fixtures.hpp"
#include "support/scratch_ledger.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::client;
using test::bytes_of;
using test::location_request_bytes;
using test::parse_reply;
using test::ScratchLedger;

namespace {

// Runs `child` in a forked process and returns its exit status (-1 if it did not exit).
template <class Child>
int exit_status_of(Child&& child) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Device open_located(const DeviceConfig& config, const char* path) {
  auto device = Device::open_secure(config, path);
  REQUIRE(device.has_value());
  if (device->ledger_status().ok()) {
    REQUIRE(device->register_component("location", 2).ok());
    double here[2] = {10, 20};
    REQUIRE(device->set_component("location", here).ok());
  }
  return std::move(*device);
}

std::string distance_request_bytes(const std::string& query, std::uint32_t round,
                                   const std::vector<double>& point, double rho,
                                   const std::string& component = "v") {
  auto request = DeviceRequest::distance_to_point({query, round}, component, point, rho);
  REQUIRE(request.has_value());
  return wire::serialize(wire::request_to_wire(*request));
}

// A polygon request on the wire, built by hand so that any coordinate can be sent.
std::string polygon_request_bytes(const std::string& query, const std::vector<double>& outer,
                                  const std::vector<double>& hole, double rho) {
  v1::DeviceRequest request;
  request.mutable_id()->set_query_id(query);
  request.mutable_id()->set_round(1);
  request.set_component_id("location");
  auto* polygon = request.mutable_signed_distance_to_region()->mutable_region()->mutable_polygon();
  for (double v : outer) polygon->mutable_outer()->add_xy(v);
  if (!hole.empty()) {
    auto* ring = polygon->add_holes();
    for (double v : hole) ring->add_xy(v);
  }
  request.set_rho(rho);
  return wire::serialize(request);
}

}  // namespace

// ---- item 1: nothing after admission depends on private data ---------------------------------

TEST_CASE("item 1: a 4096-d request at a corner of the clamp box is answered for every user",
          "[client][hardening]") {
  // The attack of the issue: p = M·s with M the plan's coordinate limit. On 51cfbc1 the device
  // rejected iff x·s < ‖x‖²/(2M): two users 1 apart were told apart by one cheap request.
  constexpr std::size_t d = 4096;
  const double rho = 1e-3;
  auto config = *DeviceConfig::cgp(1.0);
  auto plan = plan_noise(1.0, rho, config.rho_capacity());
  REQUIRE(plan.has_value());
  const double m = plan->coordinate_limit;
  REQUIRE(m <= geometry::kMaxCoordinate);  // the public-extent checks admit this p
  std::vector<double> p(d), x1(d), x2(d);
  for (std::size_t k = 0; k < d; ++k) {
    const double s = (k % 3 == 0) ? -1.0 : 1.0;
    p[k] = m * s;
    x1[k] = 0.5 * s / 64;  // ‖x1 − x2‖ = 1, x1·s > 0 > x2·s
    x2[k] = -x1[k];
  }
  for (const auto* x : {&x1, &x2}) {
    auto device = Device::open_for_simulation(config, 1, 0);
    REQUIRE(device.register_component("v", d).ok());
    REQUIRE(device.set_component("v", *x).ok());
    auto reply = parse_reply(device.handle(bytes_of(distance_request_bytes("corner", 1, p, rho))));
    INFO(reply.error_message());
    CHECK(reply.status() == v1::ANSWERED);
  }
}

TEST_CASE("item 1: the outcome of a request is a function of public data only (property)",
          "[client][hardening]") {
  CGP_SEEDED(9001);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1, 1);
  const double capacity = 1.0;
  auto config = *DeviceConfig::cgp(capacity);
  const std::size_t dims[] = {1, 2, 3, 17, 256, 4096};
  int answered = 0, rejected = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const std::size_t d = dims[trial % 6];
    // ρ from below the minimum to above the capacity, log-uniform.
    const double rho = capacity * std::pow(2.0, -20 + 22 * (unit(rng) + 1) / 2);
    auto plan = plan_noise(1.0, std::max(rho, min_rho(capacity)), capacity);
    const double m = plan ? plan->coordinate_limit : 1.0;
    // Public point: at the corner of the clamp box, inside it, or beyond it.
    const double scale = std::min(geometry::kMaxCoordinate, m * (trial % 4 == 0 ? 1.5 : 1.0));
    std::vector<double> point(d);
    for (double& v : point) v = trial % 2 ? scale * (unit(rng) < 0 ? -1 : 1) : scale * unit(rng);
    const std::string request = distance_request_bytes("q" + std::to_string(trial), 1, point, rho);
    // Three users: near the origin, far out along +point, and at the extremes of double.
    std::vector<std::vector<double>> users(3, std::vector<double>(d));
    for (std::size_t k = 0; k < d; ++k) {
      users[0][k] = unit(rng);
      users[1][k] = -point[k] * 3;
      users[2][k] = (k % 2 ? 1 : -1) * std::numeric_limits<double>::max();
    }
    std::vector<std::pair<int, int>> outcomes;
    for (const auto& x : users) {
      auto device = Device::open_for_simulation(config, static_cast<std::uint64_t>(trial), 0);
      REQUIRE(device.register_component("v", d).ok());
      REQUIRE(device.set_component("v", x).ok());
      auto reply = parse_reply(device.handle(bytes_of(request)));
      outcomes.emplace_back(static_cast<int>(reply.status()), static_cast<int>(reply.error()));
      if (reply.status() == v1::ANSWERED) {
        for (double v : reply.values()) CHECK(std::isfinite(v));
      }
    }
    INFO("trial " << trial << " d = " << d << " rho = " << rho);
    CHECK(outcomes[0] == outcomes[1]);
    CHECK(outcomes[0] == outcomes[2]);
    (outcomes[0].first == v1::ANSWERED ? answered : rejected)++;
  }
  // Both outcomes occur, so the comparison is not vacuous.
  CHECK(answered > 20);
  CHECK(rejected > 5);
}

// ---- item 2: one live handle per ledger ------------------------------------------------------

TEST_CASE("item 2: a second handle on one ledger in the same process fails closed by name",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("two-handles");
  auto config = *DeviceConfig::cgp(1.0);
  auto first = open_located(config, ledger.c_str());
  REQUIRE(first.ledger_status().ok());
  auto second = open_located(config, ledger.c_str());
  REQUIRE_FALSE(second.ledger_status().ok());
  CHECK(second.ledger_status().error().code == ErrorCode::ledger_in_use);
  CHECK(second.ledger_status().error().parameter == "ledger");
  CHECK(second.remaining() == 0);
  auto refused = parse_reply(second.handle(bytes_of(location_request_bytes("q", 1, 0.5))));
  CHECK(refused.status() == v1::REJECTED_INVALID);
  CHECK(refused.error() == v1::LEDGER_IN_USE);
  // The first handle spends as before; the total never exceeds the budget.
  int answered = 0;
  for (std::uint32_t round = 1; round <= 4; ++round) {
    auto reply = parse_reply(first.handle(bytes_of(location_request_bytes("a", round, 0.3))));
    answered += reply.status() == v1::ANSWERED;
  }
  CHECK(answered == 3);
  CHECK(first.spent() <= 1.0);
}

TEST_CASE("item 2: a second process cannot open a ledger that a live device holds",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("two-processes");
  auto config = *DeviceConfig::cgp(1.0);
  auto holder = open_located(config, ledger.c_str());
  REQUIRE(holder.ledger_status().ok());
  CHECK(exit_status_of([&] {
          auto device = Device::open_secure(config, ledger.c_str());
          if (!device) return 10;
          if (device->ledger_status().ok()) return 11;  // would double-spend
          return device->ledger_status().error().code == ErrorCode::ledger_in_use ? 0 : 12;
        }) == 0);
  // Once the holder is gone, the ledger opens again with what it spent.
  auto spent = parse_reply(holder.handle(bytes_of(location_request_bytes("x", 1, 0.25))));
  REQUIRE(spent.status() == v1::ANSWERED);
  const double total = holder.spent();
  { Device gone = std::move(holder); }
  auto reopened = Device::open_secure(config, ledger.c_str());
  REQUIRE(reopened.has_value());
  REQUIRE(reopened->ledger_status().ok());
  CHECK(reopened->spent() == total);
}

// Run in a fresh process (exec of this test binary) by the test below: opens the ledger named
// by CGP_LEDGER_HELPER_PATH and exits 0 iff it is refused with ledger_in_use.
TEST_CASE("ledger helper for another process", "[.][ledger-helper]") {
  const char* path = std::getenv("CGP_LEDGER_HELPER_PATH");
  if (!path) return;
  auto device = Device::open_secure(*DeviceConfig::cgp(1.0), path);
  const int code = !device                                                            ? 10
                   : device->ledger_status().ok()                                     ? 11
                   : device->ledger_status().error().code == ErrorCode::ledger_in_use ? 0
                                                                                      : 12;
  std::_Exit(code);
}

// [exec]: it runs a second program; qemu-user without binfmt_misc cannot exec a foreign binary,
// so cross builds leave it out (tests/CMakeLists.txt).
TEST_CASE("item 2: another process cannot open a held ledger, even after the app read the file",
          "[client][hardening][ledger][exec]") {
  // Closing any descriptor of a file drops the process's POSIX locks on it, SQLite's included.
  // An app that hashes or backs up its ledger does exactly that. The second process here is a
  // new program (exec), so it inherits nothing from this one.
  ScratchLedger ledger("exec-second");
  auto config = *DeviceConfig::cgp(1.0);
  auto holder = open_located(config, ledger.c_str());
  REQUIRE(parse_reply(holder.handle(bytes_of(location_request_bytes("h", 1, 0.5)))).status() ==
          v1::ANSWERED);
  {
    std::ifstream copy(ledger.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(copy)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > 0);
  }
  CHECK(exit_status_of([&] {
          ::setenv("CGP_LEDGER_HELPER_PATH", ledger.c_str(), 1);
          ::execl("/proc/self/exe", "cgp_client_tests", "ledger helper for another process",
                  static_cast<char*>(nullptr));
          return 127;
        }) == 0);
  // And the holder still spends correctly.
  CHECK(parse_reply(holder.handle(bytes_of(location_request_bytes("h", 2, 0.4)))).status() ==
        v1::ANSWERED);
  CHECK(holder.spent() <= 1.0);
}

TEST_CASE("item 2: a forked child cannot spend through the handle it inherited",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("forked");
  auto config = *DeviceConfig::cgp(1.0);
  auto holder = open_located(config, ledger.c_str());
  CHECK(exit_status_of([&] {
          v1::DeviceReply reply;
          const bool parsed =
              reply.ParseFromString(holder.handle(bytes_of(location_request_bytes("f", 1, 0.6))));
          return parsed && reply.status() == v1::REJECTED_INVALID &&
                         reply.error() == v1::LEDGER_FAILURE
                     ? 0
                     : 1;
        }) == 0);
  CHECK(parse_reply(holder.handle(bytes_of(location_request_bytes("f", 2, 0.6)))).status() ==
        v1::ANSWERED);
}

TEST_CASE("item 2: a charge fails closed when the stored total is not the one the handle holds",
          "[client][hardening][ledger]") {
  ScratchLedger path("reread");
  auto config = *DeviceConfig::cgp(1.0);
  for (int kind = 0; kind < 2; ++kind) {
    std::unique_ptr<Ledger> ledger;
    if (kind == 0)
      ledger = std::make_unique<SqliteLedger>(path.path.string());
    else
      ledger = std::make_unique<MemoryLedger>();
    INFO((kind == 0 ? "sqlite" : "memory"));
    auto state = ledger->load(config);
    REQUIRE(state.has_value());
    AnsweredRequest answer{{}, 0.25, "reply"};
    REQUIRE(ledger->record_answer({"q", 1}, answer, 0.0, 0.25).ok());
    // A handle that believes 0 is spent (as a second, stale handle would) is refused.
    auto stale = ledger->record_answer({"q", 2}, answer, 0.0, 0.25);
    REQUIRE_FALSE(stale.ok());
    CHECK(stale.error().code == ErrorCode::ledger_failure);
    auto found = ledger->find({"q", 2});
    REQUIRE(found.has_value());
    CHECK_FALSE(found->has_value());  // nothing was recorded
    CHECK(ledger->record_answer({"q", 2}, answer, 0.25, 0.5).ok());
  }
}

// ---- item 4: the ledger never silently starts over ---------------------------------------------

TEST_CASE("item 4: charges survive a crash followed by the loss of every side file",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("lost-wal");
  auto config = *DeviceConfig::cgp(1.0);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    auto device = Device::open_secure(config, ledger.c_str());
    if (!device || !device->ledger_status().ok()) _exit(2);
    double here[2] = {1, 2};
    if (!device->register_component("location", 2).ok() ||
        !device->set_component("location", here).ok())
      _exit(3);
    for (std::uint32_t round = 1; round <= 5; ++round) {
      Reply reply = device->handle(*DeviceRequest::location({"crash", round}, "location", 0.01));
      if (reply.status != ReplyStatus::answered) _exit(4);
    }
    const double spent = device->spent();
    if (write(fds[1], &spent, sizeof spent) != sizeof spent) _exit(5);
    _exit(0);  // no destructor, no close: as a crash
  }
  close(fds[1]);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  double spent = 0;
  REQUIRE(read(fds[0], &spent, sizeof spent) == static_cast<ssize_t>(sizeof spent));
  close(fds[0]);
  REQUIRE(spent > 0.05);
  ledger.remove_sidecars();  // a backup or migration that copies only *.db
  auto reopened = Device::open_secure(config, ledger.c_str());
  REQUIRE(reopened.has_value());
  REQUIRE(reopened->ledger_status().ok());
  CHECK(reopened->spent() == spent);
}

TEST_CASE("item 4: an existing ledger file that is empty or has no ledger tables fails closed",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("emptied");
  auto config = *DeviceConfig::cgp(1.0);
  {
    auto device = open_located(config, ledger.c_str());
    REQUIRE(device.ledger_status().ok());
    REQUIRE(parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 0.5)))).status() ==
            v1::ANSWERED);
  }
  SECTION("truncated to 0 bytes") {
    std::filesystem::resize_file(ledger.path, 0);
  }
  SECTION("an SQLite file with other tables") {
    ledger.remove_all();
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(ledger.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE notes (text TEXT);", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(db);
  }
  auto reopened = Device::open_secure(config, ledger.c_str());
  REQUIRE(reopened.has_value());
  REQUIRE_FALSE(reopened->ledger_status().ok());
  CHECK(reopened->ledger_status().error().code == ErrorCode::ledger_failure);
  CHECK(reopened->remaining() == 0);
}

TEST_CASE("item 4: a ledger deleted or replaced while open takes no more charges",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("deleted");
  ScratchLedger other("replacement");
  auto config = *DeviceConfig::cgp(1.0);
  auto device = open_located(config, ledger.c_str());
  REQUIRE(parse_reply(device.handle(bytes_of(location_request_bytes("q", 1, 0.1)))).status() ==
          v1::ANSWERED);
  SECTION("deleted") {
    std::filesystem::remove(ledger.path);
  }
  SECTION("replaced by another file") {
    { auto elsewhere = open_located(config, other.c_str()); }
    std::filesystem::rename(other.path, ledger.path);
  }
  const double remaining = device.remaining();
  for (std::uint32_t round = 2; round <= 3; ++round) {
    auto reply = parse_reply(device.handle(bytes_of(location_request_bytes("q", round, 0.1))));
    CHECK(reply.status() == v1::REJECTED_INVALID);
    CHECK(reply.error() == v1::LEDGER_FAILURE);
    CHECK(reply.values_size() == 0);
  }
  CHECK(device.remaining() <= remaining);
}

namespace {

// A ledger as format 1 wrote it: WAL mode, `spent` in state, one answer. Returns the open
// connection (the caller closes it: with `persist_wal` the -wal side file stays, as after a
// crash; without, a clean close checkpoints and removes it).
sqlite3* write_format1_ledger(const ScratchLedger& ledger, const std::string& config_bytes,
                              double spent) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(ledger.c_str(), &db) == SQLITE_OK);
  const std::string schema = R"sql(
PRAGMA journal_mode=WAL;
CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE state (id INTEGER PRIMARY KEY CHECK (id = 0), spent REAL NOT NULL CHECK (spent >= 0),
  halted INTEGER NOT NULL CHECK (halted IN (0, 1)));
CREATE TABLE answers (query_id TEXT NOT NULL, round INTEGER NOT NULL,
  digest BLOB NOT NULL CHECK (length(digest) = 32), charge REAL NOT NULL CHECK (charge > 0),
  reply BLOB NOT NULL, PRIMARY KEY (query_id, round));
INSERT INTO answers VALUES ('old', 1, zeroblob(32), 0.125, X'0a');
INSERT INTO state VALUES (0, )sql" +
                             std::to_string(spent) + R"sql(, 0);
)sql";
  REQUIRE(sqlite3_exec(db, schema.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_stmt* put = nullptr;
  REQUIRE(
      sqlite3_prepare_v2(
          db,
          "INSERT INTO meta VALUES ('format', CAST('cgpkit-ledger-1' AS BLOB)), ('config', ?1);",
          -1, &put, nullptr) == SQLITE_OK);
  sqlite3_bind_blob(put, 1, config_bytes.data(), static_cast<int>(config_bytes.size()),
                    SQLITE_TRANSIENT);
  REQUIRE(sqlite3_step(put) == SQLITE_DONE);
  sqlite3_finalize(put);
  return db;
}

void keep_wal_on_close(sqlite3* db) {
  int persist = 1;
  REQUIRE(sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist) == SQLITE_OK);
}

}  // namespace

TEST_CASE("item 4: a format-1 ledger (WAL) is migrated with its total and its replies",
          "[client][hardening][ledger]") {
  ScratchLedger ledger("format1");
  auto config = *DeviceConfig::cgp(1.0);
  const std::string config_bytes = wire::serialize(wire::config_to_wire(config));
  sqlite3* db = write_format1_ledger(ledger, config_bytes, 0.375);
  keep_wal_on_close(db);  // its side file beside it, as format 1 left it after a crash
  sqlite3_close(db);
  REQUIRE(std::filesystem::exists(ledger.path.string() + "-wal"));
  auto device = open_located(config, ledger.c_str());
  INFO((device.ledger_status().ok() ? "" : device.ledger_status().error().message));
  REQUIRE(device.ledger_status().ok());
  CHECK(device.spent() == 0.375);
  REQUIRE(parse_reply(device.handle(bytes_of(location_request_bytes("new", 1, 0.125)))).status() ==
          v1::ANSWERED);
  CHECK(device.spent() > 0.5);
  { Device closed = std::move(device); }
  // The migrated reply is kept for the retry window (its time is the migration's).
  SqliteLedger reopened(ledger.path.string());
  REQUIRE(reopened.load(config).has_value());
  auto old_answer = reopened.find({"old", 1});
  REQUIRE(old_answer.has_value());
  REQUIRE(old_answer->has_value());
  CHECK_FALSE((*old_answer)->pruned());
}

TEST_CASE("ledger: a format-1 ledger without its -wal fails closed by name",
          "[client][hardening][ledger]") {
  auto config = *DeviceConfig::cgp(1.0);
  const std::string config_bytes = wire::serialize(wire::config_to_wire(config));
  SECTION("the -wal lost after a checkpoint: the checkpointed total is lower than the truth") {
    ScratchLedger ledger("format1-lost-wal");
    ScratchLedger copy("format1-lost-wal-copy");
    sqlite3* db = write_format1_ledger(ledger, config_bytes, 0.2);
    REQUIRE(sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0; PRAGMA wal_checkpoint(TRUNCATE);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    // Spent 0.9 now, committed in the -wal only; the main file still says 0.2.
    REQUIRE(sqlite3_exec(db, "UPDATE state SET spent = 0.9 WHERE id = 0;", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    std::filesystem::copy_file(ledger.path, copy.path);  // a backup of the file alone
    keep_wal_on_close(db);
    sqlite3_close(db);
    auto device = Device::open_secure(config, copy.c_str());
    REQUIRE(device.has_value());
    REQUIRE_FALSE(device->ledger_status().ok());
    CHECK(device->ledger_status().error().code == ErrorCode::ledger_failure);
    CHECK(device->ledger_status().error().parameter == "ledger");
    CHECK(device->ledger_status().error().message.find("-wal") != std::string::npos);
    // Every request is refused, nothing is charged.
    auto reply = parse_reply(device->handle(bytes_of(location_request_bytes("q", 1, 0.01))));
    CHECK(reply.status() == v1::REJECTED_INVALID);
    CHECK(reply.error() == v1::LEDGER_FAILURE);
    // With its side file the same ledger opens at its true total.
    auto whole = Device::open_secure(config, ledger.c_str());
    REQUIRE(whole.has_value());
    REQUIRE(whole->ledger_status().ok());
    CHECK(whole->spent() == 0.9);
  }
  SECTION("closed cleanly: refused too (the file cannot tell), opened once the operator says so") {
    ScratchLedger ledger("format1-clean");
    sqlite3_close(write_format1_ledger(ledger, config_bytes, 0.5));
    REQUIRE_FALSE(std::filesystem::exists(ledger.path.string() + "-wal"));
    {
      auto device = Device::open_secure(config, ledger.c_str());
      REQUIRE(device.has_value());
      REQUIRE_FALSE(device->ledger_status().ok());
      CHECK(device->ledger_status().error().code == ErrorCode::ledger_failure);
    }
    std::ofstream(ledger.path.string() + "-wal").close();  // the documented operator step
    auto device = Device::open_secure(config, ledger.c_str());
    REQUIRE(device.has_value());
    REQUIRE(device->ledger_status().ok());
    CHECK(device->spent() == 0.5);
  }
}

// ---- item 5: rounding slack does not add up over releases --------------------------------------

TEST_CASE("item 5: every release's rounding floor is paid by its charge at one resolution",
          "[client][hardening][privatizer]") {
  // D_α of one release ≤ α·ρ·(t + a)², a = s_d·u/K; with a ≤ 2^-10·t_res the release costs at
  // most α·c·max(t, t_res)², c = ρ(1 + 2^-10)², and the filter's Σc ≤ capacity bounds the
  // total for every pair: no floor that grows with the number of releases (on 51cfbc1,
  // N = 2,000 releases at ρ = B/N added N·s_d²·2^-40 whatever their distance).
  CGP_SEEDED(9005);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(-18, 0);
  for (double capacity : {1e-6, 1e-4, 1.0, 1e3}) {
    for (std::size_t d : {std::size_t{1}, std::size_t{2}, std::size_t{784}}) {
      const double t_res = resolution(capacity, d, 0);
      for (int i = 0; i < 200; ++i) {
        const double rho = capacity * std::exp2(exponent(rng));
        auto plan = plan_noise(1.0, rho, capacity);
        REQUIRE(plan.has_value());
        const double a = std::sqrt(static_cast<double>(d)) * plan->grid();
        INFO("capacity " << capacity << " rho " << rho << " d " << d);
        REQUIRE(a * 1024 <= t_res * (1 + 1e-12));
      }
      // The issue's sequence: N identical releases at ρ = capacity/N, pairs 1e-9·t_res apart.
      for (double n : {2000.0, 262144.0}) {
        const double rho = capacity / n;
        auto plan = *plan_noise(1.0, rho, capacity);
        const double t = 1e-9 * t_res;
        const double a = std::sqrt(static_cast<double>(d)) * plan.grid();
        const double total = n * rho * (t + a) * (t + a);
        CHECK(total <= n * plan.charged_rho * t_res * t_res * (1 + 1e-9));
        CHECK(n * plan.charged_rho <= capacity * 1.0021);
      }
    }
  }
}

// ---- item 6: timing --------------------------------------------------------------------------

namespace {
class RecordingClock final : public PacingClock {
 public:
  mutable std::vector<Time> nows, sleeps;
  mutable Time current{};
  Time now() const override {
    current += std::chrono::microseconds(1);  // every read moves time on a little
    nows.push_back(current);
    return current;
  }
  void sleep_until(Time deadline) const override {
    sleeps.push_back(deadline);
    if (deadline > current) current = deadline;
  }
};
}  // namespace

TEST_CASE("location frame: projecting a GPS fix is paced to a public window wherever the fix is",
          "[client][hardening][timing][frame]") {
  const auto frame = *geometry::LocationFrame::parse("local:-73.97,40.75");
  std::vector<std::chrono::nanoseconds> windows;
  // In the area, clamped at its edge, folded near the antipode, beyond the fold's gate.
  for (const auto& [lon, lat] : std::vector<std::pair<double, double>>{
           {-73.96, 40.76}, {-3.7, 40.4}, {100.0, -35.0}, {106.03, -40.75}}) {
    auto clock = std::make_shared<RecordingClock>();
    auto device = Device::open_for_simulation(*DeviceConfig::cgp(1.0), 1, 0);
    device.set_pacing(ReplyPacing::device_default(), clock);
    REQUIRE(device.set_location_frame(frame).ok());
    REQUIRE(device.set_location_lonlat("location", lon, lat).ok());
    REQUIRE(clock->sleeps.size() == 1);
    windows.push_back(clock->sleeps[0] - clock->nows[0]);
    // A new frame re-projects the fix inside one window per fix given as lon/lat.
    REQUIRE(device.set_location_frame(*geometry::LocationFrame::parse("local:0,0")).ok());
    REQUIRE(clock->sleeps.size() == 2);
    windows.push_back(clock->sleeps[1] - clock->nows[2]);
  }
  for (std::size_t k = 0; k < windows.size(); ++k) CHECK(windows[k] == windows[0]);
  CHECK(windows[0] >= std::chrono::microseconds(50));
}

TEST_CASE("item 6: releases are paced to a window computed from public data only",
          "[client][hardening][timing]") {
  auto config = *DeviceConfig::cgp(1.0);
  const std::string region = polygon_request_bytes("poly", {0, 0, 100, 0, 100, 100, 0, 100},
                                                   {40, 40, 60, 40, 60, 60, 40, 60}, 0.01);
  std::vector<std::chrono::nanoseconds> windows;
  for (double x : {-500.0, 10.0, 50.0}) {  // outside, inside, in the hole
    auto clock = std::make_shared<RecordingClock>();
    auto device = Device::open_for_simulation(config, static_cast<std::uint64_t>(x + 1000), 0);
    device.set_pacing(ReplyPacing::device_default(), clock);
    REQUIRE(device.register_component("location", 2).ok());
    double here[2] = {x, 20};
    REQUIRE(device.set_component("location", here).ok());
    auto reply = parse_reply(device.handle(bytes_of(region)));
    INFO(reply.error_message());
    REQUIRE(reply.status() == v1::ANSWERED);
    REQUIRE(clock->sleeps.size() == 1);
    REQUIRE(clock->nows.size() == 2);
    windows.push_back(clock->sleeps[0] - clock->nows[0]);
    CHECK(device.pacing_overruns() == 0);
  }
  CHECK(windows[0] == windows[1]);
  CHECK(windows[1] == windows[2]);
  CHECK(windows[0] > std::chrono::microseconds(200));
  // open_secure paces by default; simulations do not.
  auto secure = Device::open_secure(config, nullptr);
  REQUIRE(secure.has_value());
  CHECK(secure->pacing().enabled);
  CHECK_FALSE(Device::open_for_simulation(config, 1, 0).pacing().enabled);
}

TEST_CASE("item 6: a watch's threshold draw and its ticks are paced to public windows",
          "[client][hardening][timing][watch]") {
  auto config = *DeviceConfig::cgp(1.0);
  WatchSpecParams p;
  p.watch_id = "paced";
  p.component_id = "location";
  p.statistic = StatisticKind::distance_to_point;
  p.point = {0, 0};
  p.threshold = 300;
  p.clamp_lo = 0;
  p.clamp_hi = 1000;
  p.horizon = 5;
  p.epsilon = 0.05;
  const auto spec = *WatchSpec::create(p);
  std::vector<std::chrono::nanoseconds> arming, ticks;
  for (double x : {0.0, 5000.0}) {  // inside and far away: the same windows
    auto clock = std::make_shared<RecordingClock>();
    auto device = Device::open_for_simulation(config, static_cast<std::uint64_t>(x + 7), 0);
    device.set_pacing(ReplyPacing::device_default(), clock);
    REQUIRE(device.register_component("location", 2).ok());
    double here[2] = {x, 0};
    REQUIRE(device.set_component("location", here).ok());
    REQUIRE(device.start_watch(spec).has_value());
    REQUIRE(clock->sleeps.size() == 1);  // the threshold noise's draw
    arming.push_back(clock->sleeps[0] - clock->nows[0]);
    const std::size_t before = clock->nows.size();
    REQUIRE(device.tick_watch("paced", 1).has_value());
    REQUIRE(clock->sleeps.size() == 2);
    ticks.push_back(clock->sleeps[1] - clock->nows[before]);
    CHECK(device.pacing_overruns() == 0);
  }
  CHECK(arming[0] == arming[1]);
  CHECK(ticks[0] == ticks[1]);
  CHECK(arming[0] > std::chrono::microseconds(0));
}

// ---- item 7: hostile coordinates -------------------------------------------------------------

TEST_CASE("item 7: polygons with huge coordinates are refused by name, nothing thrown or charged",
          "[client][hardening][geometry]") {
  auto config = *DeviceConfig::cgp(1.0);
  auto device = test::located_device(config, 7);
  const double before = device.remaining();
  const std::vector<double> square = {0, 0, 100, 0, 100, 100, 0, 100};
  for (double far : {2.6e11, 1e14, 5.9e20, 1.5 * std::ldexp(1.0, 511), 1e308}) {
    INFO("far vertex at " << far);
    auto reply = parse_reply(device.handle(
        bytes_of(polygon_request_bytes("far", square, {10, 10, far, 20, 10, 30}, 1e-3))));
    CHECK(reply.status() == v1::REJECTED_INVALID);
    CHECK(reply.error() == v1::OUT_OF_RANGE);
    CHECK(reply.error_message().find("polygon.holes[0]") != std::string::npos);
  }
  CHECK(device.remaining() == before);
}

TEST_CASE("item 7: every request entry takes extreme values without throwing or charging wrongly",
          "[client][hardening]") {
  const double extremes[] = {0.0,
                             -0.0,
                             std::numeric_limits<double>::denorm_min(),
                             1e-300,
                             geometry::kMaxCoordinate,
                             -geometry::kMaxCoordinate,
                             std::nextafter(geometry::kMaxCoordinate, INFINITY),
                             1e154,
                             std::numeric_limits<double>::max(),
                             -std::numeric_limits<double>::max(),
                             INFINITY,
                             NAN};
  auto config = *DeviceConfig::cgp(1.0);
  auto device = test::located_device(config, 77);
  std::uint32_t round = 0;
  int answered = 0;
  for (double a : extremes) {
    for (double b : extremes) {
      for (double rho : {1e-300, 1e-6, 0.5, 1e300}) {
        std::vector<std::string> requests;
        v1::DeviceRequest point;
        point.mutable_id()->set_query_id("x");
        point.mutable_id()->set_round(++round);
        point.set_component_id("location");
        point.mutable_distance_to_point()->add_point(a);
        point.mutable_distance_to_point()->add_point(b);
        point.set_rho(rho);
        requests.push_back(wire::serialize(point));
        v1::DeviceRequest box = point;
        box.mutable_id()->set_round(++round);
        auto* b_msg = box.mutable_signed_distance_to_region()->mutable_region()->mutable_box();
        b_msg->add_lo(a), b_msg->add_lo(-1), b_msg->add_hi(b), b_msg->add_hi(1);
        requests.push_back(wire::serialize(box));
        v1::DeviceRequest ball = point;
        ball.mutable_id()->set_round(++round);
        auto* ball_msg = ball.mutable_signed_distance_to_region()->mutable_region()->mutable_ball();
        ball_msg->add_center(a), ball_msg->add_center(0), ball_msg->set_radius(std::fabs(b));
        requests.push_back(wire::serialize(ball));
        requests.push_back(polygon_request_bytes("x" + std::to_string(++round),
                                                 {a, 0, 100, 0, 100, 100, b, 100}, {}, rho));
        for (const std::string& request : requests) {
          const double before = device.remaining();
          auto reply = parse_reply(device.handle(bytes_of(request)));
          if (reply.status() == v1::ANSWERED) {
            ++answered;
            CHECK(device.remaining() < before);
            for (double v : reply.values()) CHECK(std::isfinite(v));
          } else {
            CHECK(device.remaining() == before);
            CHECK(reply.charged_rho() == 0);
          }
        }
      }
    }
  }
  CHECK(answered > 0);
}

TEST_CASE("item 7: Proj of accepted polygons is 1-Lipschitz out to the coordinate bound",
          "[client][hardening][geometry]") {
  CGP_SEEDED(9007);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1, 1);
  const double big = geometry::kMaxCoordinate;
  // Rings at the bound, with features from kilometres down to a millimetre.
  std::vector<std::pair<geometry::Ring, std::vector<geometry::Ring>>> shapes = {
      {{{-big, -big}, {big, -big}, {big, big}, {-big, big}}, {{{0, 0}, {1e-3, 0}, {0, 1e-3}}}},
      {{{-big, -big}, {big, -big}, {0, big}}, {{{-1e3, -1e3}, {1e3, -1e3}, {0, 1e3}}}},
      {{{0, 0}, {100, 0}, {100, 100}, {0, 100}}, {}},
  };
  int checked = 0;
  for (auto& [outer, holes] : shapes) {
    auto polygon = geometry::Polygon::create(outer, holes);
    REQUIRE(polygon.has_value());
    geometry::Region region = *polygon;
    for (int i = 0; i < 20000; ++i) {
      const double scale = std::pow(10.0, 10 * (unit(rng) + 1) / 2) * (i % 2 ? 1 : big / 1e10);
      double u[2] = {scale * unit(rng), scale * unit(rng)};
      double step = std::pow(10.0, 6 * unit(rng));
      double v[2] = {u[0] + step * unit(rng), u[1] + step * unit(rng)};
      const double pu = geometry::signed_distance(region, u);
      const double pv = geometry::signed_distance(region, v);
      const double distance = std::hypot(u[0] - v[0], u[1] - v[1]);
      // Floating-point slack: a few ulps of the magnitudes involved.
      const double slack = 1e-14 * (std::fabs(u[0]) + std::fabs(u[1]) + 4 * big);
      INFO("u = (" << u[0] << ", " << u[1] << ") v = (" << v[0] << ", " << v[1] << ")");
      REQUIRE(std::fabs(pu - pv) <= distance + slack);
      ++checked;
    }
  }
  CHECK(checked == 60000);
}

TEST_CASE("item 7: a near-horizontal edge does not flip the sign far from it",
          "[client][hardening][geometry]") {
  // Found in review: with px < ax + (py − ay)·dx/dy, dx/dy overflowed to inf for a tiny dy, so
  // every point level with the edge counted a crossing: (1.5e6, 0) came out 500 km inside.
  auto polygon =
      geometry::Polygon::create(geometry::Ring{{-1e6, -5e-303}, {1e6, 5e-303}, {0, 1e6}});
  REQUIRE(polygon.has_value());
  const geometry::Region region = *polygon;
  const double u[2] = {1.5e6, 0}, v[2] = {1.5e6, 1e-301}, w[2] = {0, 1};
  CHECK(geometry::signed_distance(region, u) > 0);
  CHECK(std::fabs(geometry::signed_distance(region, u) - geometry::signed_distance(region, v)) <=
        1e-9);
  CHECK(geometry::signed_distance(region, w) < 0);
}

// ---- item 8: bounded storage -----------------------------------------------------------------

TEST_CASE(
    "item 8: replies beyond the retention window are pruned, a replay is refused and not charged",
    "[client][hardening][ledger]") {
  ScratchLedger path("retention");
  auto config = *DeviceConfig::cgp(1.0);
  LedgerRetention tight;
  tight.max_reply_bytes = 200;  // two or three location replies
  for (int kind : {1, 0}) {     // memory, then the SQLite file that is reopened below
    INFO((kind == 0 ? "sqlite" : "memory"));
    path.remove_all();
    std::unique_ptr<Ledger> ledger;
    if (kind == 0)
      ledger = std::make_unique<SqliteLedger>(path.path.string(), tight);
    else
      ledger = std::make_unique<MemoryLedger>(tight);
    auto device = Device::open(config, std::move(ledger), std::make_unique<SimulationRandom>(3, 0));
    REQUIRE(device.register_component("location", 2).ok());
    double here[2] = {1, 2};
    REQUIRE(device.set_component("location", here).ok());
    std::vector<std::string> first_bytes;
    for (std::uint32_t round = 1; round <= 10; ++round)
      first_bytes.push_back(device.handle(bytes_of(location_request_bytes("r", round, 0.01))));
    const double remaining = device.remaining();
    // The newest reply is kept: a retry gets the same bytes.
    CHECK(device.handle(bytes_of(location_request_bytes("r", 10, 0.01))) == first_bytes[9]);
    // The oldest is pruned: refused by name, nothing charged, no new noise.
    auto pruned = parse_reply(device.handle(bytes_of(location_request_bytes("r", 1, 0.01))));
    CHECK(pruned.status() == v1::REJECTED_INVALID);
    CHECK(pruned.error() == v1::REPLY_PRUNED);
    CHECK(pruned.values_size() == 0);
    CHECK(device.remaining() == remaining);
    // A different request under a pruned id is still a conflict.
    auto conflict = parse_reply(device.handle(bytes_of(location_request_bytes("r", 1, 0.02))));
    CHECK(conflict.error() == v1::REQUEST_CONFLICT);
  }
  // The pruned replies' charges stay in the total across a reopen.
  auto reopened = Device::open(config, std::make_unique<SqliteLedger>(path.path.string(), tight),
                               std::make_unique<SimulationRandom>(4, 0));
  REQUIRE(reopened.ledger_status().ok());
  CHECK(reopened.spent() >= 10 * 0.01);
}

TEST_CASE("item 8: replies older than max_age are pruned when the ledger opens",
          "[client][hardening][ledger]") {
  ScratchLedger path("age");
  auto config = *DeviceConfig::cgp(1.0);
  std::string reply;
  {
    auto device = Device::open(config, std::make_unique<SqliteLedger>(path.path.string()),
                               std::make_unique<SimulationRandom>(5, 0));
    REQUIRE(device.register_component("location", 2).ok());
    double here[2] = {1, 2};
    REQUIRE(device.set_component("location", here).ok());
    reply = device.handle(bytes_of(location_request_bytes("aged", 1, 0.01)));
    REQUIRE(parse_reply(reply).status() == v1::ANSWERED);
  }
  LedgerRetention expired;
  expired.max_age_seconds = -60;  // "older than a minute from now": everything
  auto device = Device::open(config, std::make_unique<SqliteLedger>(path.path.string(), expired),
                             std::make_unique<SimulationRandom>(6, 0));
  REQUIRE(device.ledger_status().ok());
  auto replay = parse_reply(device.handle(bytes_of(location_request_bytes("aged", 1, 0.01))));
  CHECK(replay.error() == v1::REPLY_PRUNED);
}

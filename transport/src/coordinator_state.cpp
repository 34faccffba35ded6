#include "coordinator_state.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>

#include "cgp/common/validate.hpp"
#include "cgp/v1/analyst.pb.h"

namespace cgp::transport::detail {
namespace {

constexpr const char* kFormat = "cgpkit-coordinator-state-1";

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  query_id TEXT NOT NULL UNIQUE,
  finished_unix INTEGER NOT NULL,
  result BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS mirror (
  device_id TEXT PRIMARY KEY,
  remaining REAL NOT NULL CHECK (remaining >= 0));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS used_ids (query_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS round_intents (
  query_id TEXT NOT NULL,
  round INTEGER NOT NULL,
  devices BLOB NOT NULL,
  charges BLOB NOT NULL,
  PRIMARY KEY (query_id, round));
CREATE TABLE IF NOT EXISTS watches (watch_id TEXT PRIMARY KEY, spec BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS watch_devices (
  watch_id TEXT NOT NULL,
  device_id TEXT NOT NULL,
  entry BLOB NOT NULL,
  PRIMARY KEY (watch_id, device_id));
)sql";

Error state_error(const std::string& message) {
  return make_error(ErrorCode::invalid_argument, "state", "state: " + message);
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK && stmt_ != nullptr; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

}  // namespace

struct CoordinatorState::Db {
  // One connection, used by the query thread and by gateway threads (watch answers): each call
  // holds this for its whole transaction, so no statement of one lands inside another's.
  // Recursive: save_watch and set_counters call their one-row siblings.
  std::recursive_mutex mutex;
  sqlite3* db = nullptr;
  int lock_fd = -1;
  std::string path;
  ~Db() {
    if (db) sqlite3_close(db);
    if (lock_fd >= 0) close(lock_fd);  // releases the flock
  }
  Error error(const std::string& what) const {
    return state_error(what + " (" + path + "): " + (db ? sqlite3_errmsg(db) : "no database"));
  }
  bool exec(const char* sql) const {
    return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
  }
};

namespace {

// A write the coordinator acts on (a round's intent, the mirror): fsync'd at COMMIT
// (synchronous=FULL), a power cut included. Other writes (results, watch answers, counters) stay
// NORMAL: in WAL mode a later durable commit makes every earlier one durable too.
class DurableWrite {
 public:
  explicit DurableWrite(const CoordinatorState::Db& db) : db_(db) {
    db_.exec("PRAGMA synchronous=FULL");
  }
  ~DurableWrite() { db_.exec("PRAGMA synchronous=NORMAL"); }
  DurableWrite(const DurableWrite&) = delete;
  DurableWrite& operator=(const DurableWrite&) = delete;

 private:
  const CoordinatorState::Db& db_;
};

}  // namespace

CoordinatorState::CoordinatorState(std::unique_ptr<Db> db) : db_(std::move(db)) {}
CoordinatorState::~CoordinatorState() = default;

Expected<std::unique_ptr<CoordinatorState>> CoordinatorState::open(const std::string& path,
                                                                   bool start_empty) {
  if (path.empty()) return state_error("the path is empty");
  // Fail closed: only a file that does not exist yet is made new. An empty one
  // lost its contents (the mirror, the used ids): started anew only when asked to.
  struct stat before {};
  const bool existed = ::stat(path.c_str(), &before) == 0;
  if (existed && S_ISREG(before.st_mode) && before.st_size == 0 && !start_empty)
    return state_error(path +
                       " is empty: a state file that lost its contents is not started anew "
                       "silently (the budget mirror and the used query ids would be gone); "
                       "--init-state starts a new one");
  auto db = std::make_unique<Db>();
  db->path = path;
  db->lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (db->lock_fd < 0) return state_error("cannot open " + path + ": " + std::strerror(errno));
  if (flock(db->lock_fd, LOCK_EX | LOCK_NB) != 0)
    return make_error(ErrorCode::unavailable, "state",
                      "state: " + path + " is in use by another coordinator");
  if (sqlite3_open_v2(path.c_str(), &db->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK)
    return db->error("cannot open");
  sqlite3_busy_timeout(db->db, 5000);
  const bool fresh = !existed || before.st_size == 0;
  if (!fresh) {
    // Ours, or refused before anything is written to it (another program's database stays as
    // it was).
    Statement read(db->db, "SELECT value FROM meta WHERE key = 'format'");
    const bool row = read.ok() && sqlite3_step(read.get()) == SQLITE_ROW;
    const auto* format =
        row ? reinterpret_cast<const char*>(sqlite3_column_text(read.get(), 0)) : nullptr;
    if (!format) return state_error(path + " is not a cgpkit coordinator state file");
    if (std::strcmp(format, kFormat) != 0)
      return state_error(path + " has format '" + format + "', expected " + kFormat);
  }
  // NORMAL, and FULL for the writes the coordinator acts on (DurableWrite): a round's intent is
  // on disk before its requests leave, a power cut included, so that the mirror a restart reads
  // is never above what a device could have spent.
  if (!db->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")) return db->error("setup");
  // The schema (tables added since the file was made included) and, for a new file, its format,
  // in one transaction: a crash leaves an empty file or a whole one.
  if (!db->exec("BEGIN IMMEDIATE")) return db->error("setup");
  bool ok = db->exec(kSchema);
  if (ok && fresh) {
    Statement write(db->db, "INSERT INTO meta (key, value) VALUES ('format', ?1)");
    ok = write.ok();
    if (ok) {
      sqlite3_bind_text(write.get(), 1, kFormat, -1, SQLITE_STATIC);
      ok = sqlite3_step(write.get()) == SQLITE_DONE;
    }
  }
  if (!ok || !db->exec("COMMIT")) {
    auto error = db->error("not a cgpkit coordinator state file");
    db->exec("ROLLBACK");
    return error;
  }
  return std::unique_ptr<CoordinatorState>(new CoordinatorState(std::move(db)));
}

Expected<std::vector<CoordinatorState::StoredResult>> CoordinatorState::results() const {
  const std::lock_guard lock(db_->mutex);
  Statement read(db_->db, "SELECT query_id, finished_unix, result FROM results ORDER BY seq");
  if (!read.ok()) return db_->error("read results");
  std::vector<StoredResult> out;
  int rc;
  while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
    StoredResult r;
    const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(read.get(), 0));
    if (!id) return state_error(db_->path + ": a result without a query id (not our schema)");
    r.query_id = id;
    r.finished_unix = sqlite3_column_int64(read.get(), 1);
    const auto* blob = static_cast<const char*>(sqlite3_column_blob(read.get(), 2));
    r.bytes.assign(blob ? blob : "", static_cast<std::size_t>(sqlite3_column_bytes(read.get(), 2)));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return db_->error("read results");
  return out;
}

Status CoordinatorState::save_result(const StoredResult& result) {
  const std::lock_guard lock(db_->mutex);
  Statement write(
      db_->db,
      "INSERT OR REPLACE INTO results (query_id, finished_unix, result) VALUES (?1, ?2, ?3)");
  if (!write.ok()) return db_->error("save result");
  sqlite3_bind_text(write.get(), 1, result.query_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(write.get(), 2, result.finished_unix);
  sqlite3_bind_blob(write.get(), 3, result.bytes.data(), static_cast<int>(result.bytes.size()),
                    SQLITE_TRANSIENT);
  if (sqlite3_step(write.get()) != SQLITE_DONE) return db_->error("save result");
  // Ids outlive their results: devices keep (id, round) in their ledgers for good.
  Statement used(db_->db, "INSERT OR IGNORE INTO used_ids (query_id) VALUES (?1)");
  if (!used.ok()) return db_->error("save result");
  sqlite3_bind_text(used.get(), 1, result.query_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(used.get()) != SQLITE_DONE) return db_->error("save result");
  return {};
}

Expected<std::vector<std::string>> CoordinatorState::used_ids() const {
  const std::lock_guard lock(db_->mutex);
  Statement read(db_->db, "SELECT query_id FROM used_ids");
  if (!read.ok()) return db_->error("read used ids");
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
    const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(read.get(), 0));
    if (id) out.emplace_back(id);
  }
  if (rc != SQLITE_DONE) return db_->error("read used ids");
  return out;
}

Expected<std::size_t> CoordinatorState::prune(std::size_t max_results, std::chrono::seconds max_age,
                                              std::int64_t now_unix) {
  const std::lock_guard lock(db_->mutex);
  Statement by_age(db_->db, "DELETE FROM results WHERE finished_unix < ?1");
  if (!by_age.ok()) return db_->error("prune results");
  sqlite3_bind_int64(by_age.get(), 1, now_unix - static_cast<std::int64_t>(max_age.count()));
  if (sqlite3_step(by_age.get()) != SQLITE_DONE) return db_->error("prune results");
  std::size_t removed = static_cast<std::size_t>(sqlite3_changes(db_->db));
  Statement by_count(db_->db,
                     "DELETE FROM results WHERE seq NOT IN "
                     "(SELECT seq FROM results ORDER BY seq DESC LIMIT ?1)");
  if (!by_count.ok()) return db_->error("prune results");
  sqlite3_bind_int64(by_count.get(), 1, static_cast<std::int64_t>(max_results));
  if (sqlite3_step(by_count.get()) != SQLITE_DONE) return db_->error("prune results");
  removed += static_cast<std::size_t>(sqlite3_changes(db_->db));
  return removed;
}

Expected<std::map<std::string, double>> CoordinatorState::mirror() const {
  const std::lock_guard lock(db_->mutex);
  Statement read(db_->db, "SELECT device_id, remaining FROM mirror");
  if (!read.ok()) return db_->error("read mirror");
  std::map<std::string, double> out;
  int rc;
  while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
    const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(read.get(), 0));
    if (!id) return state_error(db_->path + ": a mirror row without a device id (not our schema)");
    out[id] = sqlite3_column_double(read.get(), 1);
  }
  if (rc != SQLITE_DONE) return db_->error("read mirror");
  return out;
}

Status CoordinatorState::save_mirror(const std::vector<std::pair<std::string, double>>& changed) {
  const std::lock_guard lock(db_->mutex);
  if (changed.empty()) return {};
  return write_mirror(changed, nullptr);
}

Status CoordinatorState::settle(const std::vector<std::pair<std::string, double>>& changed,
                                const std::string& query_id) {
  const std::lock_guard lock(db_->mutex);
  return write_mirror(changed, &query_id);
}

Status CoordinatorState::write_mirror(const std::vector<std::pair<std::string, double>>& changed,
                                      const std::string* settled_query) {
  const std::lock_guard lock(db_->mutex);
  const DurableWrite durable(*db_);
  if (!db_->exec("BEGIN IMMEDIATE")) return db_->error("save mirror");
  Statement write(db_->db, "INSERT OR REPLACE INTO mirror (device_id, remaining) VALUES (?1, ?2)");
  bool ok = write.ok();
  for (const auto& [id, remaining] : changed) {
    if (!ok) break;
    sqlite3_reset(write.get());
    sqlite3_bind_text(write.get(), 1, id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(write.get(), 2, remaining < 0 ? 0.0 : remaining);
    ok = sqlite3_step(write.get()) == SQLITE_DONE;
  }
  if (ok && settled_query) {
    Statement settle(db_->db, settled_query->empty()
                                  ? "DELETE FROM round_intents"
                                  : "DELETE FROM round_intents WHERE query_id = ?1");
    ok = settle.ok();
    if (ok && !settled_query->empty())
      sqlite3_bind_text(settle.get(), 1, settled_query->c_str(), -1, SQLITE_TRANSIENT);
    if (ok) ok = sqlite3_step(settle.get()) == SQLITE_DONE;
  }
  if (!ok) {
    auto error = db_->error("save mirror");
    db_->exec("ROLLBACK");
    return error;
  }
  if (!db_->exec("COMMIT")) return db_->error("save mirror");
  return {};
}

// An intent's two blobs: the device ids, each as a 4-byte length and its bytes; the charges
// run-length coded as (4-byte count, 8-byte double) pairs, since a round asks most of its users
// the same ρ. Native byte order: the file stays on the machine that wrote it. One row per round
// costs ~1 ms at 20,000 devices where a row per device cost ~35 ms (bench/bench_state.cpp).
namespace {

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
bool take(std::string_view& in, T& value) {
  if (in.size() < sizeof value) return false;
  std::memcpy(&value, in.data(), sizeof value);
  in.remove_prefix(sizeof value);
  return true;
}

std::string column_bytes(sqlite3_stmt* stmt, int column) {
  const auto* blob = static_cast<const char*>(sqlite3_column_blob(stmt, column));
  return std::string(blob ? blob : "",
                     static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)));
}

}  // namespace

Status CoordinatorState::record_intent(const std::string& query_id, std::uint32_t round,
                                       const std::vector<const std::string*>& device_ids,
                                       const std::vector<double>& charges) {
  const std::lock_guard lock(db_->mutex);
  if (device_ids.size() != charges.size()) return state_error("record intent: sizes differ");
  std::string devices, runs;
  for (const std::string* id : device_ids) {
    put(devices, static_cast<std::uint32_t>(id->size()));
    devices += *id;
  }
  for (std::size_t k = 0; k < charges.size();) {
    std::size_t end = k + 1;
    while (end < charges.size() && charges[end] == charges[k]) ++end;
    put(runs, static_cast<std::uint32_t>(end - k));
    put(runs, charges[k]);
    k = end;
  }
  const DurableWrite durable(*db_);
  if (!db_->exec("BEGIN IMMEDIATE")) return db_->error("record intent");
  bool ok = true;
  {
    // The id is taken from the first round on: after a crash it is never run again.
    Statement used(db_->db, "INSERT OR IGNORE INTO used_ids (query_id) VALUES (?1)");
    ok = used.ok();
    if (ok) {
      sqlite3_bind_text(used.get(), 1, query_id.c_str(), -1, SQLITE_TRANSIENT);
      ok = sqlite3_step(used.get()) == SQLITE_DONE;
    }
  }
  {
    Statement write(db_->db,
                    "INSERT OR REPLACE INTO round_intents (query_id, round, devices, charges) "
                    "VALUES (?1, ?2, ?3, ?4)");
    ok = ok && write.ok();
    if (ok) {
      sqlite3_bind_text(write.get(), 1, query_id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(write.get(), 2, round);
      sqlite3_bind_blob(write.get(), 3, devices.data(), static_cast<int>(devices.size()),
                        SQLITE_STATIC);
      sqlite3_bind_blob(write.get(), 4, runs.data(), static_cast<int>(runs.size()), SQLITE_STATIC);
      ok = sqlite3_step(write.get()) == SQLITE_DONE;
    }
  }
  if (!ok) {
    auto error = db_->error("record intent");
    db_->exec("ROLLBACK");
    return error;
  }
  if (!db_->exec("COMMIT")) return db_->error("record intent");
  return {};
}

Expected<std::vector<CoordinatorState::Intent>> CoordinatorState::intents() const {
  const std::lock_guard lock(db_->mutex);
  Statement read(db_->db, "SELECT query_id, devices, charges FROM round_intents ORDER BY rowid");
  if (!read.ok()) return db_->error("read intents");
  std::vector<Intent> out;
  int rc;
  while ((rc = sqlite3_step(read.get())) == SQLITE_ROW) {
    const auto* query = reinterpret_cast<const char*>(sqlite3_column_text(read.get(), 0));
    const std::string devices = column_bytes(read.get(), 1), runs = column_bytes(read.get(), 2);
    const auto corrupt = [&] {
      return state_error(db_->path + ": an intent that does not parse (not our schema)");
    };
    if (!query) return corrupt();
    std::string_view ids = devices, charges = runs;
    std::uint32_t left = 0;
    double charge = 0;
    while (!ids.empty()) {
      std::uint32_t size = 0;
      if (!take(ids, size) || ids.size() < size) return corrupt();
      if (left == 0 && !(take(charges, left) && take(charges, charge) && left > 0))
        return corrupt();
      // A charge that is not a finite ≥ 0 number is the worst case: everything.
      const double worst =
          std::isfinite(charge) && charge >= 0 ? charge : std::numeric_limits<double>::infinity();
      out.push_back({query, std::string(ids.substr(0, size)), worst});
      ids.remove_prefix(size);
      --left;
    }
    if (left != 0 || !charges.empty()) return corrupt();
  }
  if (rc != SQLITE_DONE) return db_->error("read intents");
  return out;
}

Expected<std::uint64_t> CoordinatorState::counter(const std::string& name) const {
  const std::lock_guard lock(db_->mutex);
  Statement read(db_->db, "SELECT value FROM counters WHERE name = ?1");
  if (!read.ok()) return db_->error("read counter");
  sqlite3_bind_text(read.get(), 1, name.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(read.get());
  if (rc == SQLITE_ROW) return static_cast<std::uint64_t>(sqlite3_column_int64(read.get(), 0));
  if (rc == SQLITE_DONE) return std::uint64_t{0};
  return db_->error("read counter");
}

Status CoordinatorState::set_counter(const std::string& name, std::uint64_t value) {
  const std::lock_guard lock(db_->mutex);
  Statement write(db_->db, "INSERT OR REPLACE INTO counters (name, value) VALUES (?1, ?2)");
  if (!write.ok()) return db_->error("save counter");
  sqlite3_bind_text(write.get(), 1, name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(write.get(), 2, static_cast<std::int64_t>(value));
  if (sqlite3_step(write.get()) != SQLITE_DONE) return db_->error("save counter");
  return {};
}

Status CoordinatorState::set_counters(
    const std::vector<std::pair<std::string, std::uint64_t>>& values) {
  const std::lock_guard lock(db_->mutex);
  if (!db_->exec("BEGIN IMMEDIATE")) return db_->error("save counters");
  for (const auto& [name, value] : values) {
    if (auto saved = set_counter(name, value); !saved) {
      db_->exec("ROLLBACK");
      return saved;
    }
  }
  if (!db_->exec("COMMIT")) return db_->error("save counters");
  return {};
}

Expected<std::vector<std::string>> CoordinatorState::watches() const {
  const std::lock_guard lock(db_->mutex);
  auto blob_of = [](sqlite3_stmt* stmt, int column) {
    const auto* blob = static_cast<const char*>(sqlite3_column_blob(stmt, column));
    return std::string(blob ? blob : "",
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)));
  };
  Statement specs(db_->db, "SELECT watch_id, spec FROM watches ORDER BY rowid");
  Statement devices(db_->db, "SELECT entry FROM watch_devices WHERE watch_id = ?1 ORDER BY rowid");
  if (!specs.ok() || !devices.ok()) return db_->error("read watches");
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(specs.get())) == SQLITE_ROW) {
    v1::WatchReport report;
    const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(specs.get(), 0));
    if (!id || !report.mutable_spec()->ParseFromString(blob_of(specs.get(), 1)))
      return state_error(db_->path + ": a watch that does not parse (not our schema)");
    report.set_watch_id(id);
    sqlite3_reset(devices.get());
    sqlite3_bind_text(devices.get(), 1, id, -1, SQLITE_TRANSIENT);
    int device_rc;
    while ((device_rc = sqlite3_step(devices.get())) == SQLITE_ROW)
      if (!report.add_devices()->ParseFromString(blob_of(devices.get(), 0)))
        return state_error(db_->path + ": a watch entry that does not parse (not our schema)");
    if (device_rc != SQLITE_DONE) return db_->error("read watches");
    out.push_back(report.SerializeAsString());
  }
  if (rc != SQLITE_DONE) return db_->error("read watches");
  return out;
}

Status CoordinatorState::save_watch(const std::string& watch_id, const std::string& report_bytes) {
  const std::lock_guard lock(db_->mutex);
  v1::WatchReport report;
  if (!report.ParseFromString(report_bytes))
    return state_error("save watch: the report does not parse");
  if (!db_->exec("BEGIN IMMEDIATE")) return db_->error("save watch");
  bool ok = true;
  {
    Statement spec(db_->db, "INSERT OR REPLACE INTO watches (watch_id, spec) VALUES (?1, ?2)");
    const std::string spec_bytes = report.spec().SerializeAsString();
    ok = spec.ok();
    if (ok) {
      sqlite3_bind_text(spec.get(), 1, watch_id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_blob(spec.get(), 2, spec_bytes.data(), static_cast<int>(spec_bytes.size()),
                        SQLITE_TRANSIENT);
      ok = sqlite3_step(spec.get()) == SQLITE_DONE;
    }
  }
  for (const v1::DeviceWatch& device : report.devices()) {
    if (!ok) break;
    ok = save_watch_device(watch_id, device.device_id(), device.SerializeAsString()).ok();
  }
  if (!ok) {
    auto error = db_->error("save watch");
    db_->exec("ROLLBACK");
    return error;
  }
  if (!db_->exec("COMMIT")) return db_->error("save watch");
  return {};
}

Status CoordinatorState::save_watch_device(const std::string& watch_id,
                                           const std::string& device_id, const std::string& entry) {
  const std::lock_guard lock(db_->mutex);
  Statement write(db_->db,
                  "INSERT INTO watch_devices (watch_id, device_id, entry) VALUES (?1, ?2, ?3) "
                  "ON CONFLICT (watch_id, device_id) DO UPDATE SET entry = excluded.entry");
  if (!write.ok()) return db_->error("save watch");
  sqlite3_bind_text(write.get(), 1, watch_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(write.get(), 2, device_id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(write.get(), 3, entry.data(), static_cast<int>(entry.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(write.get()) != SQLITE_DONE) return db_->error("save watch");
  return {};
}

}  // namespace cgp::transport::detail

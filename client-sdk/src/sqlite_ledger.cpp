#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "cgp/client/ledger.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::client {
namespace {

constexpr const char* kFormat = "cgpkit-ledger-3";
// Older formats are migrated in place when first opened: 1 (WAL, no answered_at) and 2 (no
// watches, no ex-post budget).
constexpr const char* kFormatV1 = "cgpkit-ledger-1";
constexpr const char* kFormatV2 = "cgpkit-ledger-2";

// Format 3's additions, also the migration from format 2.
constexpr const char* kWatchesTable = R"sql(
CREATE TABLE watches (
  watch_id TEXT PRIMARY KEY,
  spec BLOB NOT NULL,
  digest BLOB NOT NULL CHECK (length(digest) = 32),
  charge REAL NOT NULL CHECK (charge >= 0),
  noise_high INTEGER NOT NULL,
  noise_low INTEGER NOT NULL,
  last_tick INTEGER NOT NULL DEFAULT 0 CHECK (last_tick >= 0),
  alert_tick INTEGER NOT NULL DEFAULT 0 CHECK (alert_tick >= 0),
  budget_exhausted INTEGER NOT NULL DEFAULT 0 CHECK (budget_exhausted IN (0, 1)),
  expost_spent REAL NOT NULL DEFAULT 0 CHECK (expost_spent >= 0));
)sql";
constexpr const char* kExpostColumn =
    "ALTER TABLE state ADD COLUMN expost_spent REAL NOT NULL DEFAULT 0 CHECK (expost_spent >= 0);";

constexpr const char* kSchema = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE state (
  id INTEGER PRIMARY KEY CHECK (id = 0),
  spent REAL NOT NULL CHECK (spent >= 0),
  halted INTEGER NOT NULL CHECK (halted IN (0, 1)),
  expost_spent REAL NOT NULL DEFAULT 0 CHECK (expost_spent >= 0));
CREATE TABLE answers (
  query_id TEXT NOT NULL,
  round INTEGER NOT NULL,
  digest BLOB NOT NULL CHECK (length(digest) = 32),
  charge REAL NOT NULL CHECK (charge > 0),
  reply BLOB NOT NULL,
  answered_at INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (query_id, round));
)sql";

// A prepared statement that finalizes itself.
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

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Error ledger_error(const std::string& message) {
  return make_error(ErrorCode::ledger_failure, "ledger", "ledger: " + message);
}

// Opens `path` read-write (never creating it) with the pragmas every ledger connection uses.
int open_connection(const std::string& path, sqlite3** db) {
  return sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
}

bool exec(sqlite3* db, const char* sql) {
  return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
}

// A new ledger is built completely under a temporary name and then linked to `path`, which
// fails if `path` exists: the path never names a half-made ledger, so an empty or table-less
// file there can only be damage (and fails closed).
Status create_ledger_file(const std::string& path, const std::string& config_bytes) {
  std::random_device entropy;
  const std::string temp =
      path + ".new-" + std::to_string(::getpid()) + "-" + std::to_string(entropy());
  sqlite3* db = nullptr;
  auto fail = [&](const std::string& what) -> Status {
    std::string message = what;
    if (db) {
      message += ": ";
      message += sqlite3_errmsg(db);
      sqlite3_close_v2(db);
    }
    ::unlink(temp.c_str());
    ::unlink((temp + "-journal").c_str());
    return ledger_error(message);
  };
  if (sqlite3_open_v2(temp.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK)
    return fail("cannot create " + temp);
  if (!exec(db, "PRAGMA journal_mode=DELETE;") || !exec(db, "PRAGMA synchronous=FULL;") ||
      !exec(db, "BEGIN IMMEDIATE;") || !exec(db, kSchema) || !exec(db, kWatchesTable))
    return fail("cannot create the schema in " + temp);
  {
    Statement put(db, "INSERT INTO meta(key, value) VALUES ('format', ?1), ('config', ?2);");
    if (!put.ok()) return fail("cannot initialise " + temp);
    sqlite3_bind_blob(put.get(), 1, kFormat, static_cast<int>(std::strlen(kFormat)), SQLITE_STATIC);
    sqlite3_bind_blob(put.get(), 2, config_bytes.data(), static_cast<int>(config_bytes.size()),
                      SQLITE_STATIC);
    if (sqlite3_step(put.get()) != SQLITE_DONE) return fail("cannot initialise " + temp);
  }
  if (!exec(db, "INSERT INTO state(id, spent, halted) VALUES (0, 0, 0);") || !exec(db, "COMMIT;"))
    return fail("cannot initialise " + temp);
  sqlite3_close_v2(db);
  db = nullptr;
  if (::link(temp.c_str(), path.c_str()) != 0 && errno != EEXIST)
    return fail("cannot link " + temp + " to " + path + ": " + std::strerror(errno));
  ::unlink(temp.c_str());
  // The new directory entry must be durable before the first charge relies on it.
  std::string dir =
      path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (dir.empty()) dir = ".";
  if (int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return {};
}

// A format-1 ledger was kept in WAL mode: its last commits may live only in "<path>-wal"
// until a checkpoint copies them into the file. Opened without that side file, SQLite would
// read the older checkpointed total as if nothing had happened since (a budget that goes
// back). The file cannot tell a clean close (which removes the side file) from a lost one, so
// a WAL-mode ledger without its side file fails closed; an operator who knows the device was
// closed cleanly creates an empty side file to open it.
Status require_wal_side_file(int fd, const std::string& path) {
  unsigned char header[20] = {};
  if (::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    return {};  // too short to be a database: SQLite's own checks name it
  // Bytes 18 and 19 of an SQLite file: the write and read versions, 2 in WAL mode.
  if (header[18] != 2 && header[19] != 2) return {};
  struct stat side {};
  if (::stat((path + "-wal").c_str(), &side) == 0) return {};
  return make_error(ErrorCode::ledger_failure, "ledger",
                    "ledger: " + path +
                        " is a write-ahead-log (format-1) ledger without its side file " + path +
                        "-wal: charges after its last checkpoint may be lost with it, so it is "
                        "not opened (restore the -wal from the same backup; if the device that "
                        "wrote it was closed cleanly, create an empty " +
                        path + "-wal)");
}

}  // namespace

struct SqliteLedger::Impl {
  sqlite3* db = nullptr;
  // The handle's own descriptor on the ledger file, holding flock(LOCK_EX) for the handle's
  // life. An flock belongs to this open file description: unlike SQLite's POSIX locks it is not
  // dropped when the process closes some other descriptor of the file (an app hashing or
  // copying it), and it conflicts with a second handle in the same process too.
  int lock_fd = -1;
  pid_t owner = 0;  // a forked child inherits the flock: it must not use the handle
  LedgerRetention retention;
  std::size_t kept_bytes = 0;  // bytes of replies not yet pruned
  ~Impl() { close(); }
  void close() {
    if (db) sqlite3_close_v2(db);
    db = nullptr;
    // Only after SQLite let go of the file: closing a descriptor drops this process's POSIX
    // locks on it, SQLite's included.
    if (lock_fd >= 0) ::close(lock_fd);
    lock_fd = -1;
  }
  Status usable(const std::string& path) const {
    if (!db) return ledger_error("not open");
    if (::getpid() != owner)
      return ledger_error(path + " was opened by process " + std::to_string(owner) +
                          ": a forked child cannot use its handle (open the ledger anew)");
    return {};
  }
  Error failure(const std::string& what) const {
    std::string message = what;
    if (db) {
      message += ": ";
      message += sqlite3_errmsg(db);
    }
    return ledger_error(message);
  }
  bool exec(const char* sql) const { return cgp::client::exec(db, sql); }
  // Deleted, renamed or replaced since this handle opened it: writes would go to a file that
  // nobody will read again.
  bool file_moved() const {
    int moved = 1;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK) return true;
    return moved != 0;
  }
  // Replies beyond the retention bounds lose their bytes (never their row or charge).
  bool prune() {
    const std::int64_t oldest = unix_seconds() - retention.max_age_seconds;
    Statement by_age(
        db, "UPDATE answers SET reply = X'' WHERE length(reply) > 0 AND answered_at < ?1;");
    if (!by_age.ok()) return false;
    sqlite3_bind_int64(by_age.get(), 1, oldest);
    if (sqlite3_step(by_age.get()) != SQLITE_DONE) return false;
    Statement by_size(db,
                      "UPDATE answers SET reply = X'' WHERE rowid IN (SELECT rowid FROM ("
                      "SELECT rowid, SUM(length(reply)) OVER (ORDER BY rowid DESC) AS kept "
                      "FROM answers WHERE length(reply) > 0) WHERE kept > ?1);");
    if (!by_size.ok()) return false;
    sqlite3_bind_int64(by_size.get(), 1, static_cast<sqlite3_int64>(retention.max_reply_bytes));
    if (sqlite3_step(by_size.get()) != SQLITE_DONE) return false;
    Statement total(db, "SELECT COALESCE(SUM(length(reply)), 0) FROM answers;");
    if (!total.ok() || sqlite3_step(total.get()) != SQLITE_ROW) return false;
    kept_bytes = static_cast<std::size_t>(sqlite3_column_int64(total.get(), 0));
    return true;
  }

  // The ledger's one charge transaction, for every write that moves a total: BEGIN IMMEDIATE;
  // the stored total must be the one this handle believes in (`before`; for `spent`, the
  // ledger not halted either) — anything else means another writer or damage, and a charge on
  // top of it could overspend, so nothing is written; then `write` (the rows the charge pays
  // for) and the new total; COMMIT. Any failure rolls back: a charge is whole or not at all.
  enum class Total { spent, expost_spent };
  Status charge(const std::string& path, Total total, double before, double after,
                const std::string& what, const std::function<Status()>& write) {
    if (!exec("BEGIN IMMEDIATE;")) return failure("cannot begin");
    auto rollback = [&](Error e) -> Status {
      exec("ROLLBACK;");
      return e;
    };
    const bool spent = total == Total::spent;
    {
      Statement read(db, spent ? "SELECT spent, halted FROM state WHERE id = 0;"
                               : "SELECT expost_spent, 0 FROM state WHERE id = 0;");
      if (!read.ok() || sqlite3_step(read.get()) != SQLITE_ROW)
        return rollback(failure("cannot read the recorded total"));
      const double stored = sqlite3_column_double(read.get(), 0);
      if (stored != before || sqlite3_column_int(read.get(), 1) != 0)
        return rollback(ledger_error(path + " changed underneath this handle: recorded " +
                                     (spent ? "spent " : "ex-post spent ") + format_number(stored) +
                                     ", expected " + format_number(before)));
    }
    if (Status written = write(); !written.ok()) return rollback(written.error());
    {
      Statement update(db, spent ? "UPDATE state SET spent = ?1 WHERE id = 0;"
                                 : "UPDATE state SET expost_spent = ?1 WHERE id = 0;");
      if (!update.ok()) return rollback(failure("cannot prepare"));
      sqlite3_bind_double(update.get(), 1, after);
      if (sqlite3_step(update.get()) != SQLITE_DONE)
        return rollback(failure("cannot record " + what));
    }
    if (!exec("COMMIT;")) return rollback(failure("cannot commit " + what));
    return {};
  }
};

SqliteLedger::SqliteLedger(std::string path, LedgerRetention retention)
    : path_(std::move(path)), impl_(std::make_unique<Impl>()) {
  impl_->retention = retention;
}
SqliteLedger::~SqliteLedger() = default;

Expected<LedgerState> SqliteLedger::load(const DeviceConfig& config) {
  Impl& s = *impl_;
  s.close();
  const std::string config_bytes = wire::serialize(wire::config_to_wire(config));

  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno != ENOENT) return ledger_error("cannot stat " + path_ + ": " + std::strerror(errno));
    CGP_RETURN_IF_ERROR(create_ledger_file(path_, config_bytes));
  } else if (!S_ISREG(st.st_mode)) {
    return ledger_error(path_ + " is not a regular file");
  } else if (st.st_size == 0) {
    return ledger_error(path_ +
                        " exists but is empty: a ledger that existed never starts over (restore "
                        "it from a backup of the whole file, or delete it to start a new device)");
  }

  // One live handle per ledger, before SQLite touches the file.
  s.lock_fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (s.lock_fd < 0) return ledger_error("cannot open " + path_ + ": " + std::strerror(errno));
  if (::flock(s.lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    // Not closed here: closing would drop the POSIX locks that another handle of this process
    // holds through SQLite. The descriptor is closed with this handle.
    if (error == EWOULDBLOCK) {
      return make_error(ErrorCode::ledger_in_use, "ledger",
                        "ledger: " + path_ +
                            " is open in another handle (this process or another): one live "
                            "device per ledger");
    }
    return ledger_error("cannot lock " + path_ + ": " + std::strerror(error));
  }
  s.owner = ::getpid();
  CGP_RETURN_IF_ERROR(require_wal_side_file(s.lock_fd, path_));
  if (open_connection(path_, &s.db) != SQLITE_OK) return s.failure("cannot open " + path_);
  // SQLite's own locking stays NORMAL: every transaction then checks the file for changes, so
  // the total a charge re-reads is the one on disk, not a cached page.
  sqlite3_busy_timeout(s.db, 2000);
  // Rollback journal + FULL: a commit is in the main file when it returns. Switching a format-1
  // ledger out of WAL checkpoints its WAL into the main file first.
  if (!s.exec("PRAGMA journal_mode=DELETE;") || !s.exec("PRAGMA synchronous=FULL;"))
    return s.failure("cannot set the journal mode on " + path_);
  {
    Statement check(s.db, "PRAGMA quick_check;");
    if (!check.ok() || sqlite3_step(check.get()) != SQLITE_ROW ||
        std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0)), "ok") != 0)
      return s.failure(path_ + " is corrupt");
  }
  if (!s.exec("BEGIN IMMEDIATE;")) return s.failure("cannot lock " + path_);
  auto rollback = [&](Error e) -> Expected<LedgerState> {
    s.exec("ROLLBACK;");
    return e;
  };
  {
    Statement tables(s.db,
                     "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                     "('meta', 'state', 'answers');");
    if (!tables.ok() || sqlite3_step(tables.get()) != SQLITE_ROW)
      return rollback(s.failure("cannot read the schema of " + path_));
    if (sqlite3_column_int(tables.get(), 0) != 3)
      return rollback(ledger_error(path_ + " is not a cgpkit ledger (its tables are missing)"));
  }
  std::string stored_format, stored_config;
  bool has_format = false, has_config = false;
  {
    Statement meta(s.db, "SELECT key, value FROM meta;");
    if (!meta.ok()) return rollback(s.failure("cannot read meta"));
    int rc;
    while ((rc = sqlite3_step(meta.get())) == SQLITE_ROW) {
      const auto* key_text = sqlite3_column_text(meta.get(), 0);
      std::string key(key_text ? reinterpret_cast<const char*>(key_text) : "");
      const void* blob = sqlite3_column_blob(meta.get(), 1);
      std::string value(blob ? static_cast<const char*>(blob) : "",
                        static_cast<std::size_t>(sqlite3_column_bytes(meta.get(), 1)));
      if (key == "format") has_format = true, stored_format = value;
      if (key == "config") has_config = true, stored_config = value;
    }
    if (rc != SQLITE_DONE) return rollback(s.failure("cannot read meta"));
  }
  bool has_state = false;
  LedgerState state;
  {
    Statement read(s.db, "SELECT spent, halted FROM state WHERE id = 0;");
    if (!read.ok()) return rollback(s.failure("cannot read state"));
    if (sqlite3_step(read.get()) == SQLITE_ROW) {
      has_state = true;
      state.spent = sqlite3_column_double(read.get(), 0);
      state.halted = sqlite3_column_int(read.get(), 1) != 0;
    }
  }
  if (!has_format ||
      (stored_format != kFormat && stored_format != kFormatV1 && stored_format != kFormatV2))
    return rollback(ledger_error(path_ + " is not a cgpkit ledger of format " + kFormat));
  if (!has_config || !has_state) return rollback(ledger_error(path_ + " is incomplete"));
  if (stored_config != config_bytes)
    return rollback(ledger_error(path_ + " was created for a different device configuration"));
  if (stored_format == kFormatV1) {
    // Replies of format 1 carry no time: they count as answered now, so the retry window
    // starts at the migration rather than pruning them all at once.
    if (!s.exec("ALTER TABLE answers ADD COLUMN answered_at INTEGER NOT NULL DEFAULT 0;"))
      return rollback(s.failure("cannot migrate " + path_ + " from " + kFormatV1));
    Statement stamp(s.db, "UPDATE answers SET answered_at = ?1;");
    if (!stamp.ok() || sqlite3_bind_int64(stamp.get(), 1, unix_seconds()) != SQLITE_OK ||
        sqlite3_step(stamp.get()) != SQLITE_DONE ||
        !s.exec("UPDATE meta SET value = CAST('cgpkit-ledger-2' AS BLOB) WHERE key = 'format';"))
      return rollback(s.failure("cannot migrate " + path_ + " from " + kFormatV1));
  }
  if (stored_format != kFormat) {
    if (!s.exec(kExpostColumn) || !s.exec(kWatchesTable) ||
        !s.exec("UPDATE meta SET value = CAST('cgpkit-ledger-3' AS BLOB) WHERE key = 'format';"))
      return rollback(s.failure("cannot migrate " + path_ + " to " + kFormat));
  }
  {
    Statement read(s.db, "SELECT expost_spent FROM state WHERE id = 0;");
    if (!read.ok() || sqlite3_step(read.get()) != SQLITE_ROW)
      return rollback(s.failure("cannot read state"));
    state.expost_spent = sqlite3_column_double(read.get(), 0);
  }
  // The recorded totals must cover every recorded charge; anything else is tampering or rot.
  Statement sum(s.db,
                "SELECT (SELECT COALESCE(SUM(charge), 0) FROM answers) + "
                "(SELECT COALESCE(SUM(charge), 0) FROM watches), "
                "(SELECT COALESCE(SUM(expost_spent), 0) FROM watches);");
  if (!sum.ok() || sqlite3_step(sum.get()) != SQLITE_ROW)
    return rollback(s.failure("cannot read answers"));
  const double charged = sqlite3_column_double(sum.get(), 0);
  const double expost_charged = sqlite3_column_double(sum.get(), 1);
  if (!std::isfinite(state.spent) || state.spent < charged * (1 - 1e-12) || state.spent < 0)
    return rollback(ledger_error(path_ + " is inconsistent: spent " + format_number(state.spent) +
                                 " is below the recorded charges " + format_number(charged)));
  if (!std::isfinite(state.expost_spent) || state.expost_spent < expost_charged * (1 - 1e-12) ||
      state.expost_spent < 0)
    return rollback(ledger_error(
        path_ + " is inconsistent: ex-post spent " + format_number(state.expost_spent) +
        " is below the recorded ex-post charges " + format_number(expost_charged)));
  if (!s.prune()) return rollback(s.failure("cannot prune old replies"));
  if (!s.exec("COMMIT;")) return rollback(s.failure("cannot commit"));
  return state;
}

Status SqliteLedger::record_answer(const RequestId& id, const AnsweredRequest& answer,
                                   double spent_before, double spent_after) {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  if (s.file_moved())
    return ledger_error(path_ + " was deleted or replaced while open: nothing more is recorded");
  const std::size_t kept_before = s.kept_bytes;
  Status recorded =
      s.charge(path_, Impl::Total::spent, spent_before, spent_after, "the charge", [&]() -> Status {
        Statement insert(s.db,
                         "INSERT INTO answers(query_id, round, digest, charge, reply, answered_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6);");
        if (!insert.ok()) return s.failure("cannot prepare");
        sqlite3_bind_text(insert.get(), 1, id.query_id.data(), static_cast<int>(id.query_id.size()),
                          SQLITE_STATIC);
        sqlite3_bind_int64(insert.get(), 2, id.round);
        sqlite3_bind_blob(insert.get(), 3, answer.digest.data(),
                          static_cast<int>(answer.digest.size()), SQLITE_STATIC);
        sqlite3_bind_double(insert.get(), 4, answer.charge);
        sqlite3_bind_blob(insert.get(), 5, answer.reply.data(),
                          static_cast<int>(answer.reply.size()), SQLITE_STATIC);
        sqlite3_bind_int64(insert.get(), 6, unix_seconds());
        if (sqlite3_step(insert.get()) != SQLITE_DONE) return s.failure("cannot record the charge");
        s.kept_bytes += answer.reply.size();
        if (s.kept_bytes > s.retention.max_reply_bytes && !s.prune())
          return s.failure("cannot prune old replies");
        return {};
      });
  if (!recorded.ok()) s.kept_bytes = kept_before;  // rolled back with the rows
  return recorded;
}

Status SqliteLedger::record_halt() {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  if (s.file_moved())
    return ledger_error(path_ + " was deleted or replaced while open: nothing more is recorded");
  if (!s.exec("UPDATE state SET halted = 1 WHERE id = 0;"))
    return s.failure("cannot record the halt");
  return {};
}

Expected<std::optional<AnsweredRequest>> SqliteLedger::find(const RequestId& id) {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  Statement select(s.db,
                   "SELECT digest, charge, reply FROM answers WHERE query_id = ?1 AND round = ?2;");
  if (!select.ok()) return s.failure("cannot prepare");
  sqlite3_bind_text(select.get(), 1, id.query_id.data(), static_cast<int>(id.query_id.size()),
                    SQLITE_STATIC);
  sqlite3_bind_int64(select.get(), 2, id.round);
  int rc = sqlite3_step(select.get());
  if (rc == SQLITE_DONE) return std::optional<AnsweredRequest>{};
  if (rc != SQLITE_ROW) return s.failure("cannot read answers");
  AnsweredRequest answer;
  if (sqlite3_column_bytes(select.get(), 0) != 32) return ledger_error("corrupt digest");
  std::memcpy(answer.digest.data(), sqlite3_column_blob(select.get(), 0), 32);
  answer.charge = sqlite3_column_double(select.get(), 1);
  if (const void* reply = sqlite3_column_blob(select.get(), 2)) {
    answer.reply.assign(static_cast<const char*>(reply),
                        static_cast<std::size_t>(sqlite3_column_bytes(select.get(), 2)));
  }
  return std::optional<AnsweredRequest>{std::move(answer)};
}

}  // namespace cgp::client

namespace cgp::client {

Status SqliteLedger::record_watch(const std::string& watch_id, const WatchRecord& watch,
                                  double spent_before, double spent_after) {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  if (s.file_moved())
    return ledger_error(path_ + " was deleted or replaced while open: nothing more is recorded");
  return s.charge(
      path_, Impl::Total::spent, spent_before, spent_after, "the watch", [&]() -> Status {
        Statement insert(s.db,
                         "INSERT INTO watches(watch_id, digest, charge, noise_high, "
                         "noise_low, spec) VALUES (?1, ?2, ?3, ?4, ?5, ?6);");
        if (!insert.ok()) return s.failure("cannot prepare");
        sqlite3_bind_text(insert.get(), 1, watch_id.data(), static_cast<int>(watch_id.size()),
                          SQLITE_STATIC);
        sqlite3_bind_blob(insert.get(), 2, watch.digest.data(),
                          static_cast<int>(watch.digest.size()), SQLITE_STATIC);
        sqlite3_bind_double(insert.get(), 3, watch.charge);
        sqlite3_bind_int64(insert.get(), 4, watch.threshold_noise_high);
        sqlite3_bind_int64(insert.get(), 5, static_cast<sqlite3_int64>(watch.threshold_noise_low));
        sqlite3_bind_blob(insert.get(), 6, watch.spec.data(), static_cast<int>(watch.spec.size()),
                          SQLITE_STATIC);
        if (sqlite3_step(insert.get()) != SQLITE_DONE) return s.failure("cannot record the watch");
        return {};
      });
}

Status SqliteLedger::record_watch_tick(const std::string& watch_id, const WatchTickRecord& tick,
                                       double expost_before, double expost_after) {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  if (s.file_moved())
    return ledger_error(path_ + " was deleted or replaced while open: nothing more is recorded");
  return s.charge(
      path_, Impl::Total::expost_spent, expost_before, expost_after, "the tick", [&]() -> Status {
        // Only a later tick of a watch still running: a stale handle cannot rewrite a decision.
        Statement update(s.db,
                         "UPDATE watches SET last_tick = ?2, "
                         "alert_tick = CASE WHEN ?3 THEN ?2 ELSE 0 END, budget_exhausted = ?4, "
                         "expost_spent = expost_spent + ?5 "
                         "WHERE watch_id = ?1 AND last_tick < ?2 AND alert_tick = 0 AND "
                         "budget_exhausted = 0;");
        if (!update.ok()) return s.failure("cannot prepare");
        sqlite3_bind_text(update.get(), 1, watch_id.data(), static_cast<int>(watch_id.size()),
                          SQLITE_STATIC);
        sqlite3_bind_int64(update.get(), 2, static_cast<sqlite3_int64>(tick.tick));
        sqlite3_bind_int(update.get(), 3, tick.alert ? 1 : 0);
        sqlite3_bind_int(update.get(), 4, tick.budget_exhausted ? 1 : 0);
        sqlite3_bind_double(update.get(), 5, tick.expost_charge);
        if (sqlite3_step(update.get()) != SQLITE_DONE) return s.failure("cannot record the tick");
        if (sqlite3_changes(s.db) != 1)
          return ledger_error(path_ + " changed underneath this handle: watch '" + watch_id +
                              "' is not at an earlier tick");
        return {};
      });
}

Expected<std::optional<WatchRecord>> SqliteLedger::find_watch(const std::string& watch_id) {
  Impl& s = *impl_;
  CGP_RETURN_IF_ERROR(s.usable(path_));
  Statement select(s.db,
                   "SELECT digest, charge, noise_high, noise_low, last_tick, alert_tick, "
                   "budget_exhausted, expost_spent, spec FROM watches WHERE watch_id = ?1;");
  if (!select.ok()) return s.failure("cannot prepare");
  sqlite3_bind_text(select.get(), 1, watch_id.data(), static_cast<int>(watch_id.size()),
                    SQLITE_STATIC);
  const int rc = sqlite3_step(select.get());
  if (rc == SQLITE_DONE) return std::optional<WatchRecord>{};
  if (rc != SQLITE_ROW) return s.failure("cannot read watches");
  WatchRecord watch;
  if (sqlite3_column_bytes(select.get(), 0) != 32) return ledger_error("corrupt watch digest");
  std::memcpy(watch.digest.data(), sqlite3_column_blob(select.get(), 0), 32);
  watch.charge = sqlite3_column_double(select.get(), 1);
  watch.threshold_noise_high = sqlite3_column_int64(select.get(), 2);
  watch.threshold_noise_low = static_cast<std::uint64_t>(sqlite3_column_int64(select.get(), 3));
  watch.last_tick = static_cast<std::uint64_t>(sqlite3_column_int64(select.get(), 4));
  watch.alert_tick = static_cast<std::uint64_t>(sqlite3_column_int64(select.get(), 5));
  watch.budget_exhausted = sqlite3_column_int(select.get(), 6) != 0;
  watch.expost_spent = sqlite3_column_double(select.get(), 7);
  if (const void* spec = sqlite3_column_blob(select.get(), 8))
    watch.spec.assign(static_cast<const char*>(spec),
                      static_cast<std::size_t>(sqlite3_column_bytes(select.get(), 8)));
  return std::optional<WatchRecord>{std::move(watch)};
}

}  // namespace cgp::client

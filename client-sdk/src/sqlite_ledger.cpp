#include <sqlite3.h>

#include <cmath>
#include <cstring>

#include "cgp/client/ledger.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/codec.hpp"

namespace cgp::client {
namespace {

constexpr const char* kFormat = "cgpkit-ledger-1";

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS state (
  id INTEGER PRIMARY KEY CHECK (id = 0),
  spent REAL NOT NULL CHECK (spent >= 0),
  halted INTEGER NOT NULL CHECK (halted IN (0, 1)));
CREATE TABLE IF NOT EXISTS answers (
  query_id TEXT NOT NULL,
  round INTEGER NOT NULL,
  digest BLOB NOT NULL CHECK (length(digest) = 32),
  charge REAL NOT NULL CHECK (charge > 0),
  reply BLOB NOT NULL,
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

}  // namespace

struct SqliteLedger::Impl {
  sqlite3* db = nullptr;
  ~Impl() {
    if (db) sqlite3_close_v2(db);
  }
  Error failure(const std::string& what) const {
    std::string message = "ledger: " + what;
    if (db) {
      message += ": ";
      message += sqlite3_errmsg(db);
    }
    return make_error(ErrorCode::ledger_failure, "ledger", message);
  }
  bool exec(const char* sql) const {
    return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK;
  }
};

SqliteLedger::SqliteLedger(std::string path)
    : path_(std::move(path)), impl_(std::make_unique<Impl>()) {}
SqliteLedger::~SqliteLedger() = default;

Expected<LedgerState> SqliteLedger::load(const DeviceConfig& config) {
  Impl& s = *impl_;
  if (s.db) {
    sqlite3_close_v2(s.db);
    s.db = nullptr;
  }
  if (sqlite3_open_v2(path_.c_str(), &s.db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return s.failure("cannot open " + path_);
  }
  sqlite3_busy_timeout(s.db, 5000);
  // WAL + synchronous=FULL: a COMMIT returns only after the WAL is fsynced.
  if (!s.exec("PRAGMA journal_mode=WAL;") || !s.exec("PRAGMA synchronous=FULL;"))
    return s.failure("cannot set WAL mode on " + path_);
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
  if (!s.exec(kSchema)) return rollback(s.failure("cannot create the schema in " + path_));

  const std::string config_bytes = wire::serialize(wire::config_to_wire(config));
  std::string stored_format, stored_config;
  bool has_format = false, has_config = false;
  {
    Statement meta(s.db, "SELECT key, value FROM meta;");
    if (!meta.ok()) return rollback(s.failure("cannot read meta"));
    int rc;
    while ((rc = sqlite3_step(meta.get())) == SQLITE_ROW) {
      std::string key(reinterpret_cast<const char*>(sqlite3_column_text(meta.get(), 0)));
      const void* blob = sqlite3_column_blob(meta.get(), 1);
      std::string value(static_cast<const char*>(blob),
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
  if (!has_format && !has_config && !has_state) {
    // A new ledger: bind it to this configuration.
    Statement put(s.db, "INSERT INTO meta(key, value) VALUES ('format', ?1), ('config', ?2);");
    if (!put.ok()) return rollback(s.failure("cannot initialise"));
    sqlite3_bind_blob(put.get(), 1, kFormat, static_cast<int>(std::strlen(kFormat)), SQLITE_STATIC);
    sqlite3_bind_blob(put.get(), 2, config_bytes.data(), static_cast<int>(config_bytes.size()),
                      SQLITE_STATIC);
    if (sqlite3_step(put.get()) != SQLITE_DONE) return rollback(s.failure("cannot initialise"));
    if (!s.exec("INSERT INTO state(id, spent, halted) VALUES (0, 0, 0);"))
      return rollback(s.failure("cannot initialise"));
  } else {
    if (!has_format || stored_format != kFormat)
      return rollback(s.failure(path_ + " is not a cgpkit ledger of format " + kFormat));
    if (!has_config || !has_state) return rollback(s.failure(path_ + " is incomplete"));
    if (stored_config != config_bytes)
      return rollback(s.failure(path_ + " was created for a different device configuration"));
    // The recorded total must cover every recorded charge; anything else is tampering or rot.
    Statement sum(s.db, "SELECT COALESCE(SUM(charge), 0) FROM answers;");
    if (!sum.ok() || sqlite3_step(sum.get()) != SQLITE_ROW)
      return rollback(s.failure("cannot read answers"));
    const double charged = sqlite3_column_double(sum.get(), 0);
    if (!std::isfinite(state.spent) || state.spent < charged * (1 - 1e-12) || state.spent < 0)
      return rollback(s.failure(path_ + " is inconsistent: spent " + format_number(state.spent) +
                                " is below the recorded charges " + format_number(charged)));
  }
  if (!s.exec("COMMIT;")) return rollback(s.failure("cannot commit"));
  return state;
}

Status SqliteLedger::record_answer(const RequestId& id, const AnsweredRequest& answer,
                                   double spent_after) {
  Impl& s = *impl_;
  if (!s.db) return s.failure("not open");
  if (!s.exec("BEGIN IMMEDIATE;")) return s.failure("cannot begin");
  {
    Statement insert(s.db,
                     "INSERT INTO answers(query_id, round, digest, charge, reply) "
                     "VALUES (?1, ?2, ?3, ?4, ?5);");
    Statement update(s.db, "UPDATE state SET spent = ?1 WHERE id = 0;");
    if (!insert.ok() || !update.ok()) {
      s.exec("ROLLBACK;");
      return s.failure("cannot prepare");
    }
    sqlite3_bind_text(insert.get(), 1, id.query_id.data(), static_cast<int>(id.query_id.size()),
                      SQLITE_STATIC);
    sqlite3_bind_int64(insert.get(), 2, id.round);
    sqlite3_bind_blob(insert.get(), 3, answer.digest.data(), static_cast<int>(answer.digest.size()),
                      SQLITE_STATIC);
    sqlite3_bind_double(insert.get(), 4, answer.charge);
    sqlite3_bind_blob(insert.get(), 5, answer.reply.data(), static_cast<int>(answer.reply.size()),
                      SQLITE_STATIC);
    sqlite3_bind_double(update.get(), 1, spent_after);
    if (sqlite3_step(insert.get()) != SQLITE_DONE || sqlite3_step(update.get()) != SQLITE_DONE) {
      Error e = s.failure("cannot record the charge");
      s.exec("ROLLBACK;");
      return e;
    }
  }
  if (!s.exec("COMMIT;")) {
    Error e = s.failure("cannot commit the charge");
    s.exec("ROLLBACK;");
    return e;
  }
  return {};
}

Status SqliteLedger::record_halt() {
  Impl& s = *impl_;
  if (!s.db) return s.failure("not open");
  if (!s.exec("UPDATE state SET halted = 1 WHERE id = 0;"))
    return s.failure("cannot record the halt");
  return {};
}

Expected<std::optional<AnsweredRequest>> SqliteLedger::find(const RequestId& id) {
  Impl& s = *impl_;
  if (!s.db) return s.failure("not open");
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
  if (sqlite3_column_bytes(select.get(), 0) != 32) return s.failure("corrupt digest");
  std::memcpy(answer.digest.data(), sqlite3_column_blob(select.get(), 0), 32);
  answer.charge = sqlite3_column_double(select.get(), 1);
  const void* reply = sqlite3_column_blob(select.get(), 2);
  answer.reply.assign(static_cast<const char*>(reply),
                      static_cast<std::size_t>(sqlite3_column_bytes(select.get(), 2)));
  return std::optional<AnsweredRequest>{std::move(answer)};
}

}  // namespace cgp::client

// One PostgreSQL connection through libpq, with values in and out as cgp errors: what the live
// tier's stores are written on (cluster_store.hpp). Every error names "postgres" and carries the
// server's message; a lost connection is `unavailable` and is re-dialled on the next call.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cgp/common/expected.hpp"

namespace cgp::cluster {

// A parameter of a statement: text (PostgreSQL parses it by the column's type) or raw bytes
// (bytea, sent binary: no escaping, no size blow-up), or NULL.
struct PgParam {
  std::string value;
  bool binary = false;
  bool null = false;
  static PgParam text(std::string_view v) { return {std::string(v), false, false}; }
  static PgParam integer(std::int64_t v) { return {std::to_string(v), false, false}; }
  static PgParam real(double v);  // exact: 17 significant digits
  static PgParam boolean(bool v) { return {v ? "t" : "f", false, false}; }
  static PgParam bytes(std::string_view v) { return {std::string(v), true, false}; }
  static PgParam none() { return {std::string(), false, true}; }
};

struct PgResultFree {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};

// The rows of one statement. Columns read in either format (a statement asks for binary when
// it fetches blobs); a value of the wrong shape is an error naming "postgres".
class PgRows {
 public:
  explicit PgRows(PGresult* result) : result_(result) {}
  int size() const noexcept { return PQntuples(result_.get()); }
  // The number of rows an UPDATE, INSERT or DELETE touched.
  std::int64_t affected() const noexcept;
  bool null(int row, int column) const noexcept;
  Expected<std::int64_t> integer(int row, int column) const;
  Expected<double> real(int row, int column) const;
  Expected<bool> boolean(int row, int column) const;
  std::string text(int row, int column) const;  // text format only
  Expected<std::string> bytes(int row, int column) const;
  PGresult* raw() const noexcept { return result_.get(); }

 private:
  std::unique_ptr<PGresult, PgResultFree> result_;
};

class PgConnection {
 public:
  // Dials `conninfo` (a libpq connection string or URI). Errors: `unavailable` (cannot reach
  // the server: retry) or `invalid_argument` (a malformed string), naming "postgres".
  static Expected<std::unique_ptr<PgConnection>> connect(const std::string& conninfo);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // One statement with $1.. parameters; rows in text, or binary with `binary_rows`. A lost
  // connection is re-dialled once before the statement is sent (never after: a statement that
  // may have run is not repeated behind the caller's back).
  Expected<PgRows> run(std::string_view sql, std::span<const PgParam> params = {},
                       bool binary_rows = false);
  Expected<PgRows> run(std::string_view sql, std::initializer_list<PgParam> params,
                       bool binary_rows = false) {
    return run(sql, std::span<const PgParam>(params.begin(), params.size()), binary_rows);
  }
  // Statements without parameters, separated by ';' (schema scripts).
  Status script(std::string_view sql);
  // BEGIN, `work`, COMMIT — or ROLLBACK when `work` fails (its error returned). A transaction
  // that fails to commit (serialization, a lost connection) is an error: nothing of it holds.
  Status transaction(const std::function<Status()>& work);

  // False once the server is gone (the session's advisory locks went with it).
  bool healthy() const noexcept;
  // The server's process id of this session (tests end it with pg_terminate_backend).
  int backend_pid() const noexcept;
  // How many sessions this connection has had (1 after connect, +1 per re-dial): a session's
  // advisory locks do not survive a re-dial, and a lock holder compares this to know.
  std::uint64_t sessions() const noexcept { return sessions_; }

 private:
  explicit PgConnection(std::string conninfo, PGconn* connection)
      : conninfo_(std::move(conninfo)), connection_(connection) {}
  Status redial_if_lost();
  std::string conninfo_;
  PGconn* connection_;
  std::uint64_t sessions_ = 1;
  bool in_transaction_ = false;
};

// "postgres: <what>: <the server's message>", code `unavailable` when the connection is gone.
Error postgres_error(PGconn* connection, std::string_view what);

}  // namespace cgp::cluster

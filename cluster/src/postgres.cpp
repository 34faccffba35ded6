#include "cgp/cluster/postgres.hpp"

#include <arpa/inet.h>

#include <bit>
#include <cstring>
#include <limits>

#include "cgp/common/validate.hpp"

namespace cgp::cluster {

namespace {

Error column_error(std::string_view what, int row, int column) {
  return make_error(ErrorCode::internal_error, "postgres",
                    "postgres: row " + std::to_string(row) + " column " + std::to_string(column) +
                        " is not " + std::string(what));
}

std::uint64_t big_endian(const char* bytes, int length) {
  std::uint64_t value = 0;
  for (int i = 0; i < length; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

// libpq reports to stderr unless told otherwise; our errors carry its messages instead.
void quiet_notice(void*, const char*) {}

}  // namespace

PgParam PgParam::real(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return {text, false, false};
}

Error postgres_error(PGconn* connection, std::string_view what) {
  std::string message = connection ? PQerrorMessage(connection) : "out of memory";
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  const bool lost = !connection || PQstatus(connection) != CONNECTION_OK;
  return make_error(lost ? ErrorCode::unavailable : ErrorCode::invalid_argument, "postgres",
                    "postgres: " + std::string(what) + ": " + message);
}

std::int64_t PgRows::affected() const noexcept {
  const char* count = PQcmdTuples(result_.get());
  return count && *count ? std::strtoll(count, nullptr, 10) : 0;
}

bool PgRows::null(int row, int column) const noexcept {
  return PQgetisnull(result_.get(), row, column) != 0;
}

Expected<std::int64_t> PgRows::integer(int row, int column) const {
  if (null(row, column)) return column_error("an integer (it is NULL)", row, column);
  const char* value = PQgetvalue(result_.get(), row, column);
  if (PQfformat(result_.get(), column) == 1) {
    const int length = PQgetlength(result_.get(), row, column);
    if (length != 2 && length != 4 && length != 8) return column_error("an integer", row, column);
    const std::uint64_t raw = big_endian(value, length);
    const int shift = 64 - 8 * length;  // sign-extend the narrower types
    return static_cast<std::int64_t>(raw << shift) >> shift;
  }
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0') return column_error("an integer", row, column);
  return static_cast<std::int64_t>(parsed);
}

Expected<double> PgRows::real(int row, int column) const {
  if (null(row, column)) return column_error("a number (it is NULL)", row, column);
  const char* value = PQgetvalue(result_.get(), row, column);
  if (PQfformat(result_.get(), column) == 1) {
    if (PQgetlength(result_.get(), row, column) != 8) return column_error("a float8", row, column);
    return std::bit_cast<double>(big_endian(value, 8));
  }
  char* end = nullptr;
  const double parsed = std::strtod(value, &end);
  if (end == value || *end != '\0') return column_error("a number", row, column);
  return parsed;
}

Expected<bool> PgRows::boolean(int row, int column) const {
  if (null(row, column)) return column_error("a boolean (it is NULL)", row, column);
  const char* value = PQgetvalue(result_.get(), row, column);
  if (PQfformat(result_.get(), column) == 1) return value[0] != 0;
  if (value[0] == 't') return true;
  if (value[0] == 'f') return false;
  return column_error("a boolean", row, column);
}

std::string PgRows::text(int row, int column) const {
  return std::string(PQgetvalue(result_.get(), row, column),
                     static_cast<std::size_t>(PQgetlength(result_.get(), row, column)));
}

Expected<std::string> PgRows::bytes(int row, int column) const {
  if (null(row, column)) return column_error("bytes (it is NULL)", row, column);
  if (PQfformat(result_.get(), column) == 1) return text(row, column);
  std::size_t length = 0;
  unsigned char* raw = PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(PQgetvalue(result_.get(), row, column)), &length);
  if (!raw) return column_error("bytea", row, column);
  std::string out(reinterpret_cast<const char*>(raw), length);
  PQfreemem(raw);
  return out;
}

Expected<std::unique_ptr<PgConnection>> PgConnection::connect(const std::string& conninfo) {
  char* parse_error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &parse_error);
  if (!options) {
    std::string message = parse_error ? parse_error : "cannot be parsed";
    if (parse_error) PQfreemem(parse_error);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return make_error(ErrorCode::invalid_argument, "postgres",
                      "postgres: the connection string is not valid: " + message);
  }
  PQconninfoFree(options);
  PGconn* connection = PQconnectdb(conninfo.c_str());
  if (!connection || PQstatus(connection) != CONNECTION_OK) {
    Error error = postgres_error(connection, "cannot connect");
    error.code = ErrorCode::unavailable;
    if (connection) PQfinish(connection);
    return error;
  }
  PQsetNoticeProcessor(connection, quiet_notice, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(conninfo, connection));
}

PgConnection::~PgConnection() {
  PQfinish(connection_);
}

bool PgConnection::healthy() const noexcept {
  return PQstatus(connection_) == CONNECTION_OK;
}

int PgConnection::backend_pid() const noexcept {
  return PQbackendPID(connection_);
}

Status PgConnection::redial_if_lost() {
  if (healthy()) return {};
  // Never inside a transaction: its first statements went with the old session, and the rest
  // must not run on a new one as if they were the whole.
  if (in_transaction_)
    return postgres_error(connection_, "the connection was lost mid-transaction");
  PQreset(connection_);
  if (!healthy()) return postgres_error(connection_, "reconnecting");
  PQsetNoticeProcessor(connection_, quiet_notice, nullptr);
  ++sessions_;
  return {};
}

Expected<PgRows> PgConnection::run(std::string_view sql, std::span<const PgParam> params,
                                   bool binary_rows) {
  CGP_RETURN_IF_ERROR(redial_if_lost());
  std::vector<const char*> values(params.size());
  std::vector<int> lengths(params.size()), formats(params.size());
  std::vector<Oid> types(params.size(), 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    values[i] = params[i].null ? nullptr : params[i].value.data();
    lengths[i] = static_cast<int>(params[i].value.size());
    formats[i] = params[i].binary ? 1 : 0;
    if (params[i].binary) types[i] = 17;  // bytea
  }
  const std::string statement(sql);
  PGresult* result =
      PQexecParams(connection_, statement.c_str(), static_cast<int>(params.size()), types.data(),
                   values.data(), lengths.data(), formats.data(), binary_rows ? 1 : 0);
  const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    Error error = postgres_error(connection_, statement.substr(0, statement.find_first_of("(\n")));
    if (result) {
      if (const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE)) {
        // 40001 serialization, 40P01 deadlock, 57P01 admin shutdown, 08* connection: retry.
        const std::string_view code(state);
        if (code == "40001" || code == "40P01" || code.starts_with("57P") || code.starts_with("08"))
          error.code = ErrorCode::unavailable;
        else if (code == "23505")
          error.code = ErrorCode::already_exists;
      }
      PQclear(result);
    }
    return error;
  }
  return PgRows(result);
}

Status PgConnection::script(std::string_view sql) {
  CGP_RETURN_IF_ERROR(redial_if_lost());
  const std::string statements(sql);
  PGresult* result = PQexec(connection_, statements.c_str());
  const bool ok = result && PQresultStatus(result) == PGRES_COMMAND_OK;
  if (result) PQclear(result);
  if (!ok) return postgres_error(connection_, "script");
  return {};
}

Status PgConnection::transaction(const std::function<Status()>& work) {
  CGP_RETURN_IF_ERROR(run("BEGIN"));
  in_transaction_ = true;
  Status done;
  try {
    done = work();
  } catch (...) {
    // Never left open: every later statement would run inside it.
    if (healthy()) (void)run("ROLLBACK");
    in_transaction_ = false;
    throw;
  }
  if (!done) {
    if (healthy()) (void)run("ROLLBACK");
    in_transaction_ = false;
    return done;
  }
  auto committed = run("COMMIT");
  in_transaction_ = false;
  if (!committed) return committed.error();
  // A transaction a statement aborted answers COMMIT with ROLLBACK.
  if (std::string_view(PQcmdStatus(committed->raw())) != "COMMIT")
    return make_error(ErrorCode::unavailable, "postgres",
                      "postgres: the transaction was rolled back at COMMIT");
  return {};
}

}  // namespace cgp::cluster

// A coordinator's state file read as another process would (the coordinator holds it open):
// tests check what is on disk, not what the service says about it.
#pragma once

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace cgp::test {

// The state file read as another process would (the coordinator holds it open).
class StateReader {
 public:
  explicit StateReader(const std::string& path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~StateReader() { sqlite3_close(db_); }
  // The latest round with an intent for this query (0: none); -1 before the table exists.
  long latest_round(const std::string& query_id) const {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_,
                           "SELECT COALESCE(MAX(round), 0) FROM round_intents WHERE query_id = ?1",
                           -1, &stmt, nullptr) != SQLITE_OK)
      return -1;
    sqlite3_bind_text(stmt, 1, query_id.c_str(), -1, SQLITE_TRANSIENT);
    const long out = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return out;
  }
  std::map<std::string, double> mirror() const {
    std::map<std::string, double> out;
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, "SELECT device_id, remaining FROM mirror", -1, &stmt,
                               nullptr) == SQLITE_OK);
    while (sqlite3_step(stmt) == SQLITE_ROW)
      out[reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))] =
          sqlite3_column_double(stmt, 1);
    sqlite3_finalize(stmt);
    return out;
  }
  long intents() const {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM round_intents", -1, &stmt, nullptr) ==
            SQLITE_OK);
    const long out = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return out;
  }

  // The stored bytes of a query's result (empty: none).
  std::string result_bytes(const std::string& query_id) const {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, "SELECT result FROM results WHERE query_id = ?1", -1, &stmt,
                               nullptr) == SQLITE_OK);
    sqlite3_bind_text(stmt, 1, query_id.c_str(), -1, SQLITE_TRANSIENT);
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW)
      out.assign(static_cast<const char*>(sqlite3_column_blob(stmt, 0)),
                 static_cast<std::size_t>(sqlite3_column_bytes(stmt, 0)));
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace cgp::test

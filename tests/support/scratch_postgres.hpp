// A PostgreSQL server of a test's own: initdb into a scratch folder, listening on a Unix socket
// in it only (no TCP port to collide on), started and stopped by the test. PostgreSQL refuses to
// run as root, so as root the server runs as the `postgres` system user (Debian's package
// creates it). The binaries come from CGP_POSTGRES_BINDIR (tests/CMakeLists.txt).
#pragma once

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cgp::test {

class ScratchPostgres {
 public:
  // Starts the server; the test fails (with the server's log) when it cannot.
  ScratchPostgres() {
    char folder[] = "/tmp/cgp-pg-XXXXXX";
    REQUIRE(::mkdtemp(folder) != nullptr);
    folder_ = folder;
    if (::geteuid() == 0) {
      const passwd* user = ::getpwnam("postgres");
      REQUIRE(user != nullptr);  // scripts/setup.sh installs postgresql-15
      REQUIRE(::chown(folder_.c_str(), user->pw_uid, user->pw_gid) == 0);
      as_user_ = "runuser -u postgres -- ";
    }
    const std::string initdb = as_user_ + bin("initdb") + " -D " + data() +
                               " --auth=trust --username=postgres --no-sync -E UTF8 > " + folder_ +
                               "/initdb.log 2>&1";
    INFO(log("initdb.log"));
    REQUIRE(std::system(initdb.c_str()) == 0);
    REQUIRE(start());
  }
  ~ScratchPostgres() {
    (void)stop("immediate");
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  ScratchPostgres(const ScratchPostgres&) = delete;
  ScratchPostgres& operator=(const ScratchPostgres&) = delete;

  // What libpq dials: the socket folder, as the `postgres` superuser, database `postgres`.
  std::string conninfo() const {
    return "host=" + folder_ + " port=5432 user=postgres dbname=postgres connect_timeout=5";
  }
  const std::string& folder() const { return folder_; }

  bool start() {
    const std::string command = as_user_ + bin("pg_ctl") + " -D " + data() + " -l " + folder_ +
                                "/server.log -w -t 60 -o \"-c listen_addresses='' -k " + folder_ +
                                " -p 5432\" start > /dev/null 2>&1";
    const bool started = std::system(command.c_str()) == 0;
    if (!started) UNSCOPED_INFO(log("server.log"));
    return started;
  }
  // mode: "fast" (clients disconnected, data flushed) or "immediate" (as a crash).
  bool stop(const std::string& mode = "fast") {
    const std::string command = as_user_ + bin("pg_ctl") + " -D " + data() + " -m " + mode +
                                " -w -t 60 stop > /dev/null 2>&1";
    return std::system(command.c_str()) == 0;
  }
  bool restart() { return stop("fast") && start(); }

  std::string log(const std::string& name) const {
    std::ifstream in(folder_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return name + ":\n" + text.str();
  }

 private:
  std::string data() const { return folder_ + "/data"; }
  static std::string bin(const std::string& program) {
    return std::string(CGP_POSTGRES_BINDIR) + "/" + program;
  }
  std::string folder_, as_user_;
};

}  // namespace cgp::test

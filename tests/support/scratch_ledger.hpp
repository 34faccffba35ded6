// A device ledger's path in the temporary directory, unique to this process and name, with
// SQLite's side files (-wal, -shm, -journal); removed before use and when the scope ends.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace cgp::test {

struct ScratchLedger {
  std::filesystem::path path;
  explicit ScratchLedger(const std::string& name) {
    path = std::filesystem::temp_directory_path() /
           ("cgp-ledger-" + std::to_string(::getpid()) + "-" + name + ".db");
    remove_all();
  }
  ~ScratchLedger() { remove_all(); }
  ScratchLedger(const ScratchLedger&) = delete;
  ScratchLedger& operator=(const ScratchLedger&) = delete;
  // What a backup or migration that copies only *.db leaves behind.
  void remove_sidecars() const {
    for (const char* suffix : {"-wal", "-shm", "-journal"})
      std::filesystem::remove(path.string() + suffix);
  }
  void remove_all() const {
    std::filesystem::remove(path);
    remove_sidecars();
  }
  const char* c_str() const { return path.c_str(); }
};

}  // namespace cgp::test

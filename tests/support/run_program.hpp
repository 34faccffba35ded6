// Runs a program to its end, as a shell would, for tests of the command-line programs: its exit
// code and what it wrote to stdout and stderr (through files in a scratch folder of the test's).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace cgp::test {

struct ProgramRun {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

inline std::string read_whole(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// arguments[0] is the program's path; the environment is this process's.
inline ProgramRun run_program(std::vector<std::string> arguments,
                              const std::filesystem::path& scratch) {
  const auto out_file = scratch / "stdout.txt", err_file = scratch / "stderr.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_whole(out_file), read_whole(err_file)};
}

}  // namespace cgp::test

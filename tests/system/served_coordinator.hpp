// cgp-coordinator as operators run it, for the system tests: a scratch directory with an analyst
// credential and enrolled devices, `serve` spawned on a free loopback port with its event log in
// a file, the other commands (enrol, revoke) run to their end, and bounded waiting.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/gateway.hpp"

extern char** environ;

namespace cgp::test {

// Polls `done` every 100 ms until it holds or `timeout` passes (generous: a loaded machine).
template <class Predicate>
bool within(std::chrono::milliseconds timeout, Predicate&& done) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ServedCoordinator {
 public:
  // A fresh directory `name` under the temporary directory, with an analyst credential and
  // `devices` enrolled (device-0 ..), their secrets in secrets.csv.
  ServedCoordinator(const std::string& name, std::size_t devices)
      : dir_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    REQUIRE(run({"credential", "--out", path("analyst")}) == 0);
    std::getline(std::ifstream(path("analyst")), secret);
    REQUIRE(run({"enrol", "--devices", devices_file(), "--count", std::to_string(devices),
                 "--secrets-out", path("secrets.csv")}) == 0);
    // A port that was free a moment ago (a gateway started on port 0 and stopped).
    auto probe = transport::DeviceGateway::start("127.0.0.1:0");
    REQUIRE(probe.has_value());
    address = "127.0.0.1:" + std::to_string((*probe)->port());
  }
  ~ServedCoordinator() {
    if (pid_ > 0) {  // a failed check left it running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  ServedCoordinator(const ServedCoordinator&) = delete;
  ServedCoordinator& operator=(const ServedCoordinator&) = delete;

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string devices_file() const { return path("devices.csv"); }

  // `cgp-coordinator [program_flags] serve` on `address` over the devices file, `flags` after
  // the usual ones; its stderr (the event log) goes to serve.log, appended across restarts.
  void serve(const std::vector<std::string>& flags = {},
             const std::vector<std::string>& program_flags = {}) {
    REQUIRE(pid_ == 0);
    std::vector<std::string> arguments = {CGP_COORDINATOR_PATH};
    arguments.insert(arguments.end(), program_flags.begin(), program_flags.end());
    arguments.insert(arguments.end(), {"serve", "--listen", address, "--devices", devices_file(),
                                       "--analyst-credential", path("analyst")});
    arguments.insert(arguments.end(), flags.begin(), flags.end());
    pid_ = spawn(arguments, path("serve.log"), O_WRONLY | O_CREAT | O_APPEND);
  }
  void signal(int number) const {
    REQUIRE(pid_ > 0);
    ::kill(pid_, number);
  }
  // Its exit code once serve ended within `timeout` (-1: killed by a signal); none while it runs.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (!within(timeout, [&] { return !running(); })) return std::nullopt;
    return exit_code_;
  }
  bool running() {
    if (pid_ == 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = 0;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return false;
  }
  std::string log() const { return read_text(path("serve.log")); }

  // Another cgp-coordinator command run to its end (its stderr in command.log): its exit code.
  int run(std::vector<std::string> arguments) const {
    arguments.insert(arguments.begin(), CGP_COORDINATOR_PATH);
    const pid_t pid = spawn(arguments, path("command.log"), O_WRONLY | O_CREAT | O_TRUNC);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string command_log() const { return read_text(path("command.log")); }

  // The enrolled devices' secrets as swarm members, device i at (10 i, 10 i).
  std::vector<swarm::SwarmMember> members() const {
    std::vector<swarm::SwarmMember> out;
    std::ifstream in(path("secrets.csv"));
    double x = 0;
    for (std::string line; std::getline(in, line); x += 10)
      out.push_back({line.substr(0, line.find(',')), line.substr(line.find(',') + 1), {x, x}});
    return out;
  }
  swarm::SwarmOptions swarm_options() const {
    swarm::SwarmOptions options;
    options.coordinator_address = address;
    options.config = *DeviceConfig::cgp(1.0);
    return options;
  }
  // An analyst that takes any coverage (the tests read it from the result).
  analyst::AnalystClient analyst() const {
    auto client =
        analyst::AnalystClient::connect({address, secret, "", std::chrono::seconds(30), 0.0, 1.0});
    REQUIRE(client.has_value());
    return std::move(*client);
  }
  // The coordinator's status now, from a fresh channel (none while it does not answer).
  std::optional<analyst::RemoteStatus> status() const {
    auto client = analyst::AnalystClient::connect(
        {address, secret, "", std::chrono::seconds(2), std::nullopt, std::nullopt});
    if (!client) return std::nullopt;
    auto status = client->status();
    if (!status) return std::nullopt;
    return *status;
  }
  // Waits (30 s at most) until `count` devices are connected; the event log says why not.
  bool connected(std::size_t count) const {
    const bool reached = within(std::chrono::seconds(30), [&] {
      auto now = status();
      return now && now->connected == count;
    });
    if (!reached) WARN("not " << count << " devices connected; the event log:\n" << log());
    return reached;
  }

  std::string address, secret;

 private:
  pid_t spawn(const std::vector<std::string>& arguments, const std::string& err_file,
              int flags) const {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), flags, 0600);
    std::vector<char*> argv;
    for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(spawned == 0);
    return pid;
  }

  std::filesystem::path dir_;
  pid_t pid_ = 0;
  int exit_code_ = -1;  // of the last serve that ended
};

}  // namespace cgp::test

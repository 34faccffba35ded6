// A program kept running as its supervisor (systemd's Restart=always) keeps it: started again a
// moment after each exit, until the test stops it. For the live tier's crash-only processes,
// which end on purpose (a lost lease, a new leader) and count on being started again.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cgp::test {

class SupervisedProgram {
 public:
  // arguments[0] is the program's path; `log`: a file every start appends its stdout and stderr
  // to ("": this process's); `restart_after` is the pause before each new start.
  explicit SupervisedProgram(
      std::vector<std::string> arguments, std::string log = {},
      std::chrono::milliseconds restart_after = std::chrono::milliseconds(200))
      : arguments_(std::move(arguments)), log_(std::move(log)), restart_after_(restart_after) {
    keeper_ = std::thread([this] { keep_running(); });
  }
  ~SupervisedProgram() {
    {
      std::lock_guard lock(mutex_);  // no start after this: the keeper checks under the lock
      stopping_ = true;
      if (pid_ > 0) ::kill(pid_, SIGKILL);
    }
    keeper_.join();
  }
  SupervisedProgram(const SupervisedProgram&) = delete;
  SupervisedProgram& operator=(const SupervisedProgram&) = delete;

  // Sends `number` to the running process (if any): with SIGKILL, a crash it is started after.
  void signal(int number) {
    std::lock_guard lock(mutex_);
    if (pid_ > 0) ::kill(pid_, number);
  }
  // How many times it was started.
  int starts() const { return starts_; }
  // The exit codes of its ends so far (-signal for a signal).
  std::vector<int> exits() const {
    std::lock_guard lock(mutex_);
    return exits_;
  }

 private:
  void keep_running() {
    std::vector<char*> argv;
    for (auto& a : arguments_) argv.push_back(a.data());
    argv.push_back(nullptr);
    while (!stopping_) {
      pid_t pid = 0;
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        if (!log_.empty()) {
          posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                           0600);
          posix_spawn_file_actions_adddup2(&actions, 1, 2);
        }
        const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (spawned != 0) return;
        pid_ = pid;
        ++starts_;
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      {
        std::lock_guard lock(mutex_);
        pid_ = 0;
        exits_.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
      }
      for (auto waited = std::chrono::milliseconds(0); waited < restart_after_ && !stopping_;
           waited += std::chrono::milliseconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::vector<std::string> arguments_;
  const std::string log_;
  const std::chrono::milliseconds restart_after_;
  mutable std::mutex mutex_;
  pid_t pid_ = 0;
  std::atomic<int> starts_{0};
  std::vector<int> exits_;
  std::atomic<bool> stopping_{false};
  std::thread keeper_;
};

}  // namespace cgp::test

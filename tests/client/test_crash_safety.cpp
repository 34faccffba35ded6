#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>

#include "cgp/client/device.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::client;

namespace {

std::filesystem::path scratch_ledger(int trial) {
  return std::filesystem::temp_directory_path() /
         ("cgp-crash-" + std::to_string(::getpid()) + "-" + std::to_string(trial) + ".db");
}

void remove_ledger(const std::filesystem::path& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    std::filesystem::remove(path.string() + suffix);
}

// The child: a device answering requests in a loop, writing the charge of every reply that
// leaves it to the pipe, until it is killed. It says when it is ready, so that the kill's random
// moment falls among the replies however slow the machine (under qemu, opening the ledger alone
// can outlast any fixed delay).
[[noreturn]] void answer_until_killed(const std::filesystem::path& path, int out_fd, int ready_fd,
                                      int trial) {
  auto config = *DeviceConfig::cgp(1e9);
  auto device = Device::open_secure(config, path.c_str());
  if (!device || !device->register_component("location", 2).ok()) _exit(2);
  double here[2] = {1, 2};
  if (!device->set_component("location", here).ok()) _exit(2);
  const char ready = 'r';
  if (write(ready_fd, &ready, 1) != 1) _exit(4);
  close(ready_fd);
  for (std::uint32_t round = 1;; ++round) {
    auto request =
        *DeviceRequest::location({"crash-" + std::to_string(trial), round}, "location", 1e4);
    Reply reply = device->handle(request);
    if (reply.status != ReplyStatus::answered) _exit(3);
    // The reply "leaves the device" here.
    if (write(out_fd, &reply.charged_rho, sizeof reply.charged_rho) != sizeof reply.charged_rho)
      _exit(4);
  }
}

}  // namespace

// DESIGN §2, charge before release: a child process answers requests with an SQLite ledger and
// is killed with SIGKILL at a random moment; the parent collects every reply that left through
// a pipe. After reopening the ledger, its spent total must cover every one of them.
TEST_CASE("crash safety: SIGKILL at random moments never loses a charge whose reply left",
          "[client][ledger][crash]") {
  CGP_SEEDED(31337);
  std::mt19937_64 rng(seed);
  // The kill falls after a random number of replies (0 included: during the first charge) plus a
  // random delay, so it lands among the replies on a fast machine and under qemu alike.
  std::uniform_int_distribution<int> replies_before_kill(0, 8);
  std::uniform_int_distribution<int> delay_us(0, 5000);
  const int trials = 200;
  int trials_with_replies = 0;
  long total_replies = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto path = scratch_ledger(trial);
    remove_ledger(path);
    int fds[2];
    int ready_fds[2];
    REQUIRE(pipe(fds) == 0);
    REQUIRE(pipe(ready_fds) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(fds[0]);
      close(ready_fds[0]);
      answer_until_killed(path, fds[1], ready_fds[1], trial);
    }
    close(fds[1]);
    close(ready_fds[1]);
    // Blocks until the child is ready, or has died (then read returns 0 and waitpid tells).
    char ready = 0;
    const bool child_ready = read(ready_fds[0], &ready, 1) == 1;
    close(ready_fds[0]);
    double received = 0;
    int replies = 0;
    double charge;
    for (int wait_for = replies_before_kill(rng); replies < wait_for; ++replies) {
      if (read(fds[0], &charge, sizeof charge) != static_cast<ssize_t>(sizeof charge)) break;
      received += charge;
    }
    usleep(static_cast<useconds_t>(delay_us(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    INFO("trial " << trial);
    REQUIRE(child_ready);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));

    while (read(fds[0], &charge, sizeof charge) == static_cast<ssize_t>(sizeof charge)) {
      received += charge;
      ++replies;
    }
    close(fds[0]);
    trials_with_replies += replies > 0;
    total_replies += replies;

    auto reopened = Device::open_secure(*DeviceConfig::cgp(1e9), path.c_str());
    REQUIRE(reopened.has_value());
    REQUIRE(reopened->ledger_status().ok());
    INFO("replies received " << replies << ", ledger spent " << reopened->spent());
    CHECK(reopened->spent() >= received);
    remove_ledger(path);
  }
  std::cout << "[crash] " << total_replies << " replies left in " << trials_with_replies << " of "
            << trials << " trials\n";
  // The test means something only if kills land while replies are flowing.
  CHECK(trials_with_replies >= trials / 4);
}

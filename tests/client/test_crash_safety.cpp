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
// leaves it to the pipe, until it is killed.
[[noreturn]] void answer_until_killed(const std::filesystem::path& path, int out_fd, int trial) {
  auto config = *DeviceConfig::cgp(1e9);
  auto device = Device::open_secure(config, path.c_str());
  if (!device || !device->register_component("location", 2).ok()) _exit(2);
  double here[2] = {1, 2};
  if (!device->set_component("location", here).ok()) _exit(2);
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
  std::uniform_int_distribution<int> delay_us(0, 40000);
  const int trials = 200;
  int trials_with_replies = 0;
  long total_replies = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto path = scratch_ledger(trial);
    remove_ledger(path);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(fds[0]);
      answer_until_killed(path, fds[1], trial);
    }
    close(fds[1]);
    usleep(static_cast<useconds_t>(delay_us(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    INFO("trial " << trial);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));

    double received = 0;
    int replies = 0;
    double charge;
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

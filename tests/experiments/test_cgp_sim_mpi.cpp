// cgp-sim under mpiexec: every experiment gives the same rows on 1, 2 and 4 ranks as in one
// process (all fields but the wall time), over shared memory and over TCP between the ranks;
// data is generated per rank, scattered from rank 0 or broadcast and resampled; a rank that
// cannot load its slice stops the job with one named error from rank 0, never a hang.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "support/seed.hpp"

namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code;
  std::string out, err;
};

// Every launch is bounded: a job that hangs is killed and shows as exit 124.
constexpr const char* kTimeout = "timeout 120 ";

// Root may launch (CI runs as root); oversubscribe: 4 ranks on a 2-core machine. Sanitized
// builds: Open MPI's own allocations are not ours to report.
const std::string kEnvironment =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
    "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 ";

Run run(const std::string& command) {
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const fs::path out = dir / ("cgp-mpi-out-" + tag), err = dir / ("cgp-mpi-err-" + tag);
  const std::string line = kEnvironment + kTimeout + command + " >" + out.string() + " 2>" +
                           err.string() + " </dev/null";
  const int status = std::system(line.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  Run r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

std::string mpiexec(int ranks, const std::string& extra = "") {
  return std::string(CGP_MPIEXEC_PATH) + " -n " + std::to_string(ranks) + " " + extra + " " +
         CGP_SIM_PATH;
}

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& tag) {
    dir = fs::temp_directory_path() / ("cgp-mpi-test-" + tag + "-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

nlohmann::json rows_of(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  auto rows = nlohmann::json::parse(in);
  REQUIRE(rows.is_array());
  REQUIRE_FALSE(rows.empty());
  for (auto& row : rows) row.erase("seconds");  // the only field that may differ
  return rows;
}

// The experiment in one process, then under mpiexec with each rank count: the same rows.
void check_same_rows(const std::string& arguments, std::initializer_list<int> ranks,
                     const std::string& mpi_flags = "") {
  Scratch scratch("rows");
  const std::string single = scratch.path("single.json");
  const Run one = run(std::string(CGP_SIM_PATH) + " " + arguments + " --json " + single);
  INFO(arguments << "\n" << one.err);
  REQUIRE(one.exit_code == 0);
  const auto expected = rows_of(single);
  for (int p : ranks) {
    const std::string json = scratch.path("ranks" + std::to_string(p) + ".json");
    const Run job = run(mpiexec(p, mpi_flags) + " " + arguments + " --json " + json);
    INFO(p << " rank(s): " << job.err);
    REQUIRE(job.exit_code == 0);
    CHECK(rows_of(json) == expected);
    // Rank 0 alone prints the table: its header once.
    REQUIRE(job.out.find("query ") != std::string::npos);
    CHECK(job.out.find("query ") == job.out.rfind("query "));
  }
}

std::string xy_csv(const Scratch& scratch, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> coordinate(5000, 1500);
  const std::string path = scratch.path("points.csv");
  std::ofstream out(path);
  out << "x,y\n";
  for (std::size_t i = 0; i < n; ++i) out << coordinate(rng) << "," << coordinate(rng) << "\n";
  return path;
}

}  // namespace

TEST_CASE("cgp-sim range and kde under mpiexec equal one process on 1 2 and 4 ranks",
          "[sim][mpi]") {
  check_same_rows("range --n 20000 --rho 1e-4,1e-3 --w 1000,3000 --c 4,8 --reps 3", {1, 2, 4});
  check_same_rows("kde --n 20000 --rho 1e-4 --b 500 --reps 3", {1, 2, 4});
}

TEST_CASE("cgp-sim knn multi-range and threshold under mpiexec equal one process", "[sim][mpi]") {
  CGP_SEEDED(1303);
  Scratch scratch("data");
  const std::string csv = xy_csv(scratch, 6000, seed);
  check_same_rows("knn --data " + csv + " --rho 1e-3 --k 5,20 --reps 3", {1, 2, 4});
  check_same_rows("multi-range --n 20000 --budget 1e-3 --m 3 --w 2000 --reps 2", {1, 2, 4});
  check_same_rows("threshold --column income --q 0.2,0.5 --rho 0.01 --reps 5 --n 3000", {2});
}

TEST_CASE("cgp-sim scatters a CSV from rank 0 and resamples per global id under mpiexec",
          "[sim][mpi]") {
  CGP_SEEDED(1304);
  Scratch scratch("data");
  const std::string csv = xy_csv(scratch, 5000, seed);
  check_same_rows("range --data " + csv + " --rho 1e-3 --w 2000 --reps 3", {2, 4});
  check_same_rows("range --data " + csv + " --n 12000 --rho 1e-3 --w 2000 --reps 3", {2, 4});
}

TEST_CASE("cgp-sim under mpiexec over TCP between the ranks gives the same rows", "[sim][mpi]") {
  check_same_rows("range --n 20000 --rho 1e-3 --w 2000 --reps 3", {2},
                  "--mca btl tcp,self --mca btl_tcp_if_include lo");
}

TEST_CASE("a rank that cannot load its slice stops the job with a named error from rank 0",
          "[sim][mpi]") {
  Scratch scratch("data");
  SECTION("rank 0 cannot read the data file") {
    const Run job = run(mpiexec(2) + " range --data " + scratch.path("missing.csv") +
                        " --rho 1e-3 --w 2000 --reps 1");
    CHECK(job.exit_code != 0);
    CHECK(job.exit_code != 124);  // not a hang
    CHECK(job.err.find("cgp-sim: rank 0: ") != std::string::npos);
    CHECK(job.err.find("missing.csv") != std::string::npos);
  }
  SECTION("too many ranks leave one with no users") {
    const Run job = run(mpiexec(4) + " range --n 300 --rho 1e-3 --w 2000 --reps 1");
    CHECK(job.exit_code != 0);
    CHECK(job.exit_code != 124);
    // One message, from rank 0, naming the lowest failing rank and the parameter's meaning.
    CHECK(job.err.find("cgp-sim: rank ") != std::string::npos);
    CHECK(job.err.find("use fewer ranks") != std::string::npos);
    CHECK(job.err.find("cgp-sim:") == job.err.rfind("cgp-sim:"));
  }
}

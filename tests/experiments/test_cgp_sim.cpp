// cgp-sim end to end: each subcommand on small generated data, JSON keys, errors and exit
// codes, reproducibility with --seed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

// Runs cgp-sim with `arguments` (a shell-quoted string), capturing stdout and stderr.
Run run_sim(const std::string& arguments) {
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const fs::path out = dir / ("cgp-sim-out-" + tag), err = dir / ("cgp-sim-err-" + tag);
  const std::string command =
      std::string(CGP_SIM_PATH) + " " + arguments + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(command.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  Run run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return run;
}

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("cgp-sim-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(dir / name) << content;
    return (dir / name).string();
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

std::string xy_csv(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> coordinate(5000, 1500);
  std::string csv = "x,y\n";
  for (std::size_t i = 0; i < n; ++i)
    csv += std::to_string(coordinate(rng)) + "," + std::to_string(coordinate(rng)) + "\n";
  return csv;
}

nlohmann::json parse_rows(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

void check_keys(const nlohmann::json& rows) {
  REQUIRE(rows.is_array());
  REQUIRE_FALSE(rows.empty());
  for (const auto& row : rows)
    for (const char* key : {"query", "method", "c", "split", "rho", "param", "reps", "error_mean",
                            "error_p25", "error_p75", "privsav_mean", "privsav_p25", "privsav_p75",
                            "seconds", "noise", "released"})
      CHECK(row.contains(key));
  // In-process rows count their noisy values; a live coordinator's cannot.
  for (const auto& row : rows) {
    if (row.value("noise", "") == "device") {
      CHECK(row["released"].is_null());
    } else {
      CHECK(row["released"].is_number_unsigned());
      CHECK(row["released"].get<std::uint64_t>() > 0);
    }
  }
}

}  // namespace

TEST_CASE("cgp-sim: every subcommand runs on small data and writes complete JSON rows", "[sim]") {
  CGP_SEEDED(9001);
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(300, seed));
  std::string vectors = "a,b,c,label\n";
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> v(0, 10);
  for (int i = 0; i < 200; ++i)
    vectors += std::to_string(v(rng)) + "," + std::to_string(v(rng)) + "," +
               std::to_string(v(rng)) + ",x\n";
  const auto vec = scratch.file("vectors.csv", vectors);
  std::string incomes = "household,income\n";
  for (int i = 0; i < 500; ++i)
    incomes += std::to_string(i) + "," + std::to_string(1000 * (i % 60)) + "\n";
  const auto inc = scratch.file("incomes.csv", incomes);
  const std::string json = scratch.path("rows.json");
  const std::string common = " --reps 2 --c 4 --seed 3 --json " + json;

  struct Case {
    std::string arguments;
    std::size_t rows;
  };
  const Case cases[] = {
      {"range --data " + points + " --rho 1e-4,1e-3 --w 1000" + common, 2 * 4},
      {"kde --data " + points + " --rho 1e-4 --b 300,600" + common, 2 * 4},
      {"knn --data " + vec + " --rho 1e-2 --k 3 --methods BM1,PM1 --split even,double" + common,
       1 + 2},
      {"multi-range --data " + points + " --budget 1e-3 --m 3 --w 1500" + common, 4},
      {"threshold --data " + inc + " --column income --below 9000 --q 0.1,0.5 --rho 1" + common,
       2 * 2},
  };
  for (const Case& c : cases) {
    INFO("cgp-sim " << c.arguments);
    Run run = run_sim(c.arguments);
    INFO("stderr: " << run.err);
    REQUIRE(run.exit_code == 0);
    CHECK(run.out.find("PrivSav") != std::string::npos);  // the table header
    auto rows = parse_rows(json);
    check_keys(rows);
    CHECK(rows.size() == c.rows);
  }
}

TEST_CASE("cgp-sim: every row of a wide rho sweep is answered with the row's own budget", "[sim]") {
  // A device answers ρ ≥ capacity·2^-18 only. Each row's users get exactly the row's ρ as their
  // budget; with the sweep's largest ρ as every row's capacity, the 1e-8 row was all rejections
  // (CountErr 1, PrivSav 100%) and looked like a result.
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(300, 6));
  const std::string json = scratch.path("wide.json");
  Run run = run_sim("range --data " + points +
                    " --rho 1e-8,1e-2 --w 2000 --methods BM0 --reps 2 --seed 4 --json " + json);
  REQUIRE(run.exit_code == 0);
  auto rows = parse_rows(json);
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    INFO(row.dump());
    CHECK(row["privsav_mean"].get<double>() < 1e-9);  // BM0 spends the whole row budget
    // Every user answered once per repetition with a 2-D point: 300 · 2 · 2 noisy values.
    CHECK(row["released"].get<std::uint64_t>() == 300 * 2 * 2);
  }
}

TEST_CASE("cgp-sim: --seed makes two runs identical", "[sim]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(300, 5));
  std::string runs[3];
  for (int i = 0; i < 3; ++i) {
    const std::string json = scratch.path("r" + std::to_string(i) + ".json");
    Run run =
        run_sim("range --data " + points + " --rho 1e-4 --w 800 --reps 3 --threads " +
                std::to_string(1 + i % 2) + " --seed " + (i < 2 ? "11" : "12") + " --json " + json);
    REQUIRE(run.exit_code == 0);
    auto rows = parse_rows(json);
    for (auto& row : rows) row.erase("seconds");
    runs[i] = rows.dump();
  }
  CHECK(runs[0] == runs[1]);  // same seed, 1 and 2 threads
  CHECK(runs[0] != runs[2]);  // another seed
}

TEST_CASE("cgp-sim: CSV with CRLF lines, quotes, blank lines and spaces reads as plain CSV",
          "[sim]") {
  Scratch scratch;
  const auto file = scratch.file("crlf.csv", "x,y\r\n1,2\r\n\"3\",4\r\n\r\n 5 , \"6\"\r\n\n7,8");
  Run run = run_sim("range --data " + file + " --rho 1 --w 3 --reps 1 --methods BM0");
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("4 x/y points") != std::string::npos);
  // Without quotes or carriage returns (the plain splitter): spaces and tabs around cells too.
  const auto plain = scratch.file("plain.csv", "x ,\ty\n1,2\n 3 ,\t4\n\n5,6\t\n");
  run = run_sim("range --data " + plain + " --rho 1 --w 3 --reps 1 --methods BM0");
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("3 x/y points") != std::string::npos);
  // A file shorter than a std::string's inline buffer (its cells must survive being moved).
  const auto tiny = scratch.file("tiny.csv", "x,y\n1,2\n");
  run = run_sim("range --data " + tiny + " --rho 1 --w 3 --reps 1 --methods BM0");
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("1 x/y points") != std::string::npos);
}

TEST_CASE("cgp-sim: bad input gives one clear line and a non-zero exit", "[sim]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(50, 1));
  const auto header_only = scratch.file("empty.csv", "x,y\n");
  const auto words = scratch.file("words.csv", "x,y\n1,2\nthree,4\n");
  const auto no_columns = scratch.file("cols.csv", "a,b\n1,2\n");
  const auto short_row = scratch.file("short.csv", "x,y\n1,2\n3\n");
  const auto quoted_comma = scratch.file("quoted.csv", "x,y\n1,2\n\"3,5\",4\n");
  const auto vectors = scratch.file("vectors.csv", "a,b\n1,2\n3,4\n5,6\n");
  // An IDX header announcing 2^20 images of 64 × 64 pixels (2^32 bytes, past 32 bits) over 10
  // bytes: truncated, said at once, nothing allocated for the claim.
  const auto huge_idx = scratch.file(
      "plain-name.bin",
      std::string("\x00\x00\x08\x03\x00\x10\x00\x00\x00\x00\x00\x40\x00\x00\x00\x40", 16) +
          std::string(10, '\x07'));
  struct Case {
    std::string arguments;
    int exit_code;
    std::string mentions;
  };
  const Case cases[] = {
      {"range --data /nonexistent.csv --rho 1e-4 --w 100", 3, "cannot open"},
      {"range --data " + header_only + " --rho 1e-4 --w 100", 3, "no data rows"},
      {"range --data " + words + " --rho 1e-4 --w 100", 3, "'three' is not a finite number"},
      {"range --data " + no_columns + " --rho 1e-4 --w 100", 3, "lon,lat or x,y"},
      {"range --data " + short_row + " --rho 1e-4 --w 100", 3, "row 3 has 1 fields, the header 2"},
      {"range --data " + quoted_comma + " --rho 1e-4 --w 100", 3, "'3,5' is not a finite number"},
      {"threshold --data " + points + " --column income --q 0.5 --rho 1", 3,
       "no column named 'income'"},
      {"range --data " + points + " --rho -1 --w 100", 2, "--rho"},
      {"range --data " + points + " --rho 1e-4 --w 0", 2, "--w"},
      {"range --data " + points + " --rho 1e-4 --w 100 --methods XM9", 2, "--methods"},
      {"range --data " + points + " --rho 1e-4 --w 100 --beta 2", 2, "--beta"},
      {"range --data " + points + " --rho 1e-4 --w 100 --split triple", 2, "--split"},
      {"range --data " + points + " --rho 1e-4 --w 100 --projection utm", 2, "--projection"},
      {"range --data " + points + " --rho 1e-4 --w 100 --noise loud", 2, "--noise"},
      {"threshold --data " + points + " --column x --q 1.5 --rho 1", 2, "--q"},
      {"range --data " + points + " --w 100", 2, "--rho"},
      {"range --data " + points + " --rho abc --w 100", 2, "rho"},
      {"bogus", 2, "subcommand"},
      // Numbers users can trust: named, at the documented exit code.
      {"range --data " + points + " --rho 5e-324 --w 100", 2, "--rho 5e-324"},
      {"multi-range --data " + points + " --budget 1e300 --m 2 --w 100", 2, "--budget"},
      {"knn --data " + vectors + " --rho 1e-2 --k 18446744073709551615", 2, "--k"},
      {"range --data " + points + " --rho 1e-4 --w 100 --threads 3000", 2, "--threads"},
      {"range --data " + points + " --rho 1e-4 --w 100 --n 1000000000000", 2, "--n"},
      {"range --data " + points + " --rho 1e-4 --w 100 --plot /dev/full", 2, "--plot"},
      {"range --data " + points + " --rho 1e-4 --w 100 --plot /nonexistent/dir/fig", 2, "--plot"},
      {"range --data " + points + " --rho 1e-4 --w 100 --json /dev/full", 2, "--json"},
      {"range --data " + points + " --rho 1e-4 --w 100 --json /nonexistent/rows.json", 2, "--json"},
      {"knn --data " + huge_idx + " --rho 1e-2 --k 3", 3, "truncated"},
      // On 3f97682 these were "internal error", or read until out of memory.
      {"range --data " + points + " --rho 1e-4 --w 1e308", 2, "--w"},
      {"range --data " + points + " --rho 1e-4 --w 1e-300", 2, "--w"},
      {"multi-range --data " + points + " --budget 1 --m 2 --w 1e308", 2, "--w"},
      {"range --data " + points + " --rho 1e-4 --w 100 --reps -1", 2, "--reps"},
      {"range --data " + scratch.dir.string() + " --rho 1e-4 --w 100", 3, "not a regular file"},
      {"range --data /dev/zero --rho 1e-4 --w 100", 3, "not a regular file"},
      {"range --data /proc/self/mem --rho 1e-4 --w 100", 3, "(or a /proc file)"},
  };
  for (const Case& c : cases) {
    INFO("cgp-sim " << c.arguments);
    Run run = run_sim(c.arguments);
    INFO("stderr: " << run.err);
    CHECK(run.exit_code == c.exit_code);
    CHECK(run.err.find(c.mentions) != std::string::npos);
    // One line.
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
}

TEST_CASE("cgp-sim: --plot writes PNG and SVG figures", "[sim]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(200, 2));
  const std::string base = scratch.path("figure");
  Run run =
      run_sim("range --data " + points + " --rho 1e-4,1e-3 --w 500,1000 --reps 2 --plot " + base);
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(fs::file_size(base + ".svg") > 1000);
  CHECK(fs::file_size(base + ".png") > 1000);
}

TEST_CASE("cgp-sim accuracy: AF, AF-latest and PM1 rows with certification and rho per user",
          "[sim][accuracy_first]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(2000, 8));
  const std::string json = scratch.path("accuracy.json");
  Run run = run_sim("accuracy --data " + points +
                    " --target 0.3 --growth 2 --cap 1e-2 --w 3000 --max-rounds 10 --reps 4 "
                    "--json " +
                    json);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto rows = parse_rows(json);
  REQUIRE(rows.size() == 3);
  check_keys(rows);
  for (const auto& row : rows) {
    CHECK(row["query"] == "accuracy");
    CHECK(row["target"] == 0.3);
    CHECK(row["rho_mean"].get<double>() > 0);
    CHECK(row["rho_mean"].get<double>() <= 1e-2);
    CHECK(row["rho_p95"].get<double>() <= 1e-2);
    CHECK(row["rounds"].get<double>() >= 1);
    if (row["method"] == "PM1") {
      CHECK(row["certified"].is_null());  // the fixed-ρ baseline certifies nothing
    } else {
      CHECK(row["certified"].get<double>() >= 0);
      CHECK(row["certified"].get<double>() <= 1);
    }
  }
  CHECK(run.out.find("certified") != std::string::npos);  // the table's own columns
  // KDE instead of range counts (--b): rows "accuracy-kde" with the same columns.
  const std::string kde_json = scratch.path("accuracy-kde.json");
  Run kde = run_sim("accuracy --data " + points +
                    " --b 800 --target 0.3 --absolute 1e-5 --growth 2 --cap 1e-2 --max-rounds 10 "
                    "--reps 3 --json " +
                    kde_json);
  INFO(kde.err);
  REQUIRE(kde.exit_code == 0);
  const auto kde_rows = parse_rows(kde_json);
  REQUIRE(kde_rows.size() == 3);
  for (const auto& row : kde_rows) {
    CHECK(row["query"] == "accuracy-kde");
    CHECK(row["param"] == 800);
    CHECK(row["rho_mean"].get<double>() <= 1e-2);
  }
  // Bad targets and growths are named usage errors; nothing runs.
  Run bad = run_sim("accuracy --data " + points + " --target 1.5");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--target") != std::string::npos);
  bad = run_sim("accuracy --data " + points + " --growth 1");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--growth") != std::string::npos);
}

TEST_CASE("cgp-sim top-regions: the race against BM0 with correctness and rho per user",
          "[sim][top_regions]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(3000, 9));
  const std::string json = scratch.path("top.json");
  Run run = run_sim("top-regions --data " + points +
                    " --k 1,2 --cap 1e-2 --cell 1000 --columns 3 --rows 3 --max-rounds 8 "
                    "--reps 3 --json " +
                    json);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto rows = parse_rows(json);
  REQUIRE(rows.size() == 4);
  for (const auto& row : rows) {
    CHECK(row["query"] == "top-regions");
    CHECK(row["correct"].get<double>() >= 0);
    CHECK(row["correct"].get<double>() <= 1);
    CHECK(row["rho_mean"].get<double>() <= 1e-2);
    if (row["method"] == "BM0") {
      CHECK(row["rho_mean"].get<double>() == Approx(1e-2));  // everyone pays the whole cap
      CHECK(row["certified"].is_null());
    }
  }
  Run bad = run_sim("top-regions --data " + points + " --k 10 --columns 3 --rows 3");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--k") != std::string::npos);
}

TEST_CASE("cgp-sim multi-range --target: AF against PM1 with certified and within-target shares",
          "[sim][accuracy_first]") {
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(2000, 10));
  const std::string json = scratch.path("multi.json");
  Run run =
      run_sim("multi-range --data " + points +
              " --budget 1e-2 --m 4 --w 3000 --target 0.2 --max-rounds 10 --reps 2 --json " + json);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto rows = parse_rows(json);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["method"] == "AF");
  CHECK(rows[1]["method"] == "PM1");
  for (const auto& row : rows) {
    CHECK(row["within_target"].get<double>() >= 0);
    CHECK(row["within_target"].get<double>() <= 1);
    CHECK(row["rho_p95"].get<double>() <= 1e-2);
  }
  CHECK(rows[1]["certified"].is_null());
  Run bad = run_sim("multi-range --data " + points + " --budget 1e-2 --m 4 --w 3000 --target 2");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--target") != std::string::npos);
}

TEST_CASE("cgp-sim: a file is IDX by its magic number, not by its name", "[sim]") {
  CGP_SEEDED(9011);
  Scratch scratch;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> v(0, 10);
  std::string csv = "a,b,c\n";
  for (int i = 0; i < 100; ++i)
    csv +=
        std::to_string(v(rng)) + "," + std::to_string(v(rng)) + "," + std::to_string(v(rng)) + "\n";
  // Before: any path containing "idx" was opened as an IDX image file.
  const auto named_idx = scratch.file("my-idx-vectors.csv", csv);
  Run run = run_sim("knn --data " + named_idx + " --rho 1e-2 --k 3 --reps 1 --methods BM1");
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("BM1") != std::string::npos);
}

TEST_CASE(
    "cgp-sim: one meaning per data file (lon/lat projected for knn too, index columns "
    "skipped, --columns)",
    "[sim]") {
  CGP_SEEDED(9021);
  Scratch scratch;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> lon(-74.02, -73.95), lat(40.70, 40.78), x(0, 1000);
  std::string lonlat = "id,lon,lat\n", indexed = ",a,b\n", named = "Unnamed: 0,id,a,b\n";
  for (int i = 0; i < 150; ++i) {
    lonlat += std::to_string(1000 + i) + "," + std::to_string(lon(rng)) + "," +
              std::to_string(lat(rng)) + "\n";
    indexed +=
        std::to_string(i) + "," + std::to_string(x(rng)) + "," + std::to_string(x(rng)) + "\n";
    named += std::to_string(i) + "," + std::to_string(7 * i) + "," + std::to_string(x(rng)) + "," +
             std::to_string(x(rng)) + "\n";
  }
  const std::string run_knn = " --rho 1e-2 --k 3 --reps 1 --methods BM1";
  // lon/lat: the same projected points range and kde use (and the id column is no coordinate).
  Run projected = run_sim("knn --data " + scratch.file("points.csv", lonlat) + run_knn);
  INFO("stderr: " << projected.err);
  REQUIRE(projected.exit_code == 0);
  CHECK(projected.out.find("150 lon/lat points, local projection") != std::string::npos);
  // pandas' to_csv index (an unnamed first column) is not a coordinate.
  Run indexed_run = run_sim("knn --data " + scratch.file("indexed.csv", indexed) + run_knn);
  REQUIRE(indexed_run.exit_code == 0);
  CHECK(indexed_run.out.find("150 vectors of dimension 2") != std::string::npos);
  // "Unnamed: 0" is skipped; a numeric id is kept unless --columns says otherwise.
  const auto named_file = scratch.file("named.csv", named);
  Run all = run_sim("knn --data " + named_file + run_knn);
  REQUIRE(all.exit_code == 0);
  CHECK(all.out.find("vectors of dimension 3") != std::string::npos);
  Run chosen = run_sim("knn --data " + named_file + " --columns a,b" + run_knn);
  REQUIRE(chosen.exit_code == 0);
  CHECK(chosen.out.find("vectors of dimension 2") != std::string::npos);
  Run missing = run_sim("knn --data " + named_file + " --columns a,zz" + run_knn);
  CHECK(missing.exit_code == 3);
  CHECK(missing.err.find("no column named 'zz'") != std::string::npos);
}

// The file's SHA-256 as coreutils' sha256sum prints it (an independent implementation).
std::string sha256sum(const std::string& path) {
  FILE* pipe = ::popen(("sha256sum " + path).c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[65] = {};
  REQUIRE(std::fread(buffer, 1, 64, pipe) == 64);
  ::pclose(pipe);
  return buffer;
}

TEST_CASE("cgp-sim: a data file over 1 MiB is named by its SHA-256 in every row", "[sim]") {
  // The digest once went through the 1 MiB reader of PEM files and came out empty for the
  // NYC data (2.8 MB); it is now streamed.
  CGP_SEEDED(9032);
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(60000, seed));
  REQUIRE(std::filesystem::file_size(points) > (std::size_t{1} << 20));
  const std::string json = scratch.path("rows.json");
  Run run = run_sim("range --data " + points + " --rho 1e-3 --w 1000 --reps 1 --methods PM1 " +
                    "--json " + json);
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  const auto rows = parse_rows(json);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["data_sha256"] == sha256sum(points));
}

TEST_CASE("cgp-sim: runs record themselves, rows per repetition, rows written as they finish",
          "[sim]") {
  CGP_SEEDED(9031);
  Scratch scratch;
  const auto points = scratch.file("points.csv", xy_csv(200, seed));
  const std::string json = scratch.path("rows.json"), per_rep = scratch.path("reps.json");
  Run run = run_sim("range --data " + points + " --rho 1e-3 --w 1000 --reps 4 --methods BM0,PM1 " +
                    "--seed 17 --json " + json + " --per-rep " + per_rep);
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  // The table has a median column and a legend with units.
  CHECK(run.out.find("median") != std::string::npos);
  CHECK(run.out.find("# CountErr = ") != std::string::npos);
  CHECK(run.out.find("w = square side (m)") != std::string::npos);
  // Every row says how it was made.
  const std::string digest = sha256sum(points);
  const auto rows = parse_rows(json);
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(row["seed"] == 17);
    CHECK(row["data"] == points);
    CHECK(row["data_sha256"] == digest);
    CHECK(row["n"] == 200);
    CHECK(row["d"] == 2);
    CHECK(row["projection"] == "local");
    CHECK(row["beta"] == 0.1);
    CHECK(row["noise"] == "fast");
    CHECK(row["param_name"] == "w");
    CHECK(row["version"].get<std::string>().size() > 0);
    CHECK(row["commit"].get<std::string>().size() > 0);
    CHECK(row["error_median"].is_number());
  }
  // One row per repetition, whose median is the row's.
  const auto reps = parse_rows(per_rep);
  REQUIRE(reps.size() == 8);
  std::vector<double> pm1;
  for (const auto& r : reps)
    if (r["method"] == "PM1") pm1.push_back(r["error"].get<double>());
  REQUIRE(pm1.size() == 4);
  std::sort(pm1.begin(), pm1.end());
  CHECK(rows[1]["error_median"].get<double>() == Approx((pm1[1] + pm1[2]) / 2));
  // A bad --per-rep path fails before the run.
  Run bad =
      run_sim("range --data " + points + " --rho 1e-3 --w 1000 --per-rep /nonexistent/r.json");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--per-rep") != std::string::npos);
}

TEST_CASE("cgp-sim: an interrupted run keeps the rows it finished", "[sim]") {
  Scratch scratch;
  const std::string json = scratch.path("rows.json");
  // Many rows over the built-in city; killed once the first rows are on disk.
  const std::string command =
      std::string(CGP_SIM_PATH) +
      " range --rho 1e-5,1e-4,1e-3,1e-2 --w 500,1000,2000 --reps 40 --json " + json +
      " > /dev/null 2>&1 & echo $!";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  long pid = 0;
  REQUIRE(std::fscanf(pipe, "%ld", &pid) == 1);
  ::pclose(pipe);
  for (int i = 0; i < 600 && !fs::exists(json); ++i) ::usleep(100000);
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  ::usleep(200000);
  REQUIRE(fs::exists(json));
  const auto rows = parse_rows(json);  // a whole JSON array, never half a file
  CHECK(rows.size() >= 1);
  CHECK(rows.size() <= 4 * 3 * 4);
  for (const auto& row : rows) CHECK(row["reps"] == 40);
}

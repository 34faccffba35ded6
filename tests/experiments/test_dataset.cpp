// Data files: the loaders read a plain numeric CSV straight from its text (no cell views) and
// every other file cell by cell. Both ways must give the same values, bit for bit, and the same
// error for the same bad row: each file here is read twice, once plain and once with a quoted
// header (which sends the whole file the general way), and the two answers compared.
#include <unistd.h>

#include <bit>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cgp/experiments/dataset.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::experiments;
namespace fs = std::filesystem;

namespace {

struct Files {
  fs::path dir;
  int count = 0;
  Files() {
    dir = fs::temp_directory_path() / ("cgp-dataset-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Files() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::string write(const std::string& text) {
    const auto path = dir / ("f" + std::to_string(count++) + ".csv");
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
};

// A loader's answer as text: its values' bits, or its error message (minus the file's name).
template <class T>
std::string answer(const Expected<T>& loaded, const std::string& path) {
  if (!loaded) {
    std::string message = loaded.error().message;
    for (std::size_t at; (at = message.find(path)) != std::string::npos;)
      message.replace(at, path.size(), "FILE");
    return "error: " + message;
  }
  const std::vector<double>* values;
  if constexpr (std::is_same_v<T, Dataset>)
    values = &loaded->points;
  else
    values = &*loaded;
  std::string bits;
  for (double v : *values) bits += std::to_string(std::bit_cast<std::uint64_t>(v)) + " ";
  return bits;
}

// A number written in one of the forms a data file may hold.
std::string number(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> value(-1e4, 1e4);
  const double v = value(rng);
  char text[64];
  switch (rng() % 6) {
    case 0:
      std::snprintf(text, sizeof text, "%.4f", v);
      break;
    case 1:
      std::snprintf(text, sizeof text, "%.17g", v);
      break;
    case 2:
      std::snprintf(text, sizeof text, "%e", v);
      break;
    case 3:
      std::snprintf(text, sizeof text, "+%.3f", std::fabs(v));
      break;
    case 4:
      std::snprintf(text, sizeof text, "%d", static_cast<int>(v));
      break;
    default:
      std::snprintf(text, sizeof text, "%.2E", v);
      break;
  }
  return text;
}

// Cells that are not finite numbers, or not one cell.
const char* const kBadCells[] = {"nan", "inf", "-inf", "1e",    "--1",  "+-2",
                                 "",    "1 2", "x",    "1e999", "0x10", "+",
                                 "-",   ".",   "1,5",  "1.5.5", "\t",   "3 ,4"};

}  // namespace

TEST_CASE("data files: the plain reader and the general one agree, values and errors",
          "[experiments][data]") {
  CGP_SEEDED(8101);
  std::mt19937_64 rng(seed);
  Files files;
  int failures_seen = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Columns: x, y, sometimes a text column, sometimes more numbers.
    std::vector<std::string> header = {"x", "y"};
    const bool text_column = rng() % 3 == 0, extra = rng() % 2 == 0;
    if (text_column) header.insert(header.begin() + static_cast<long>(rng() % 3), "name");
    if (extra) header.push_back("z");
    const std::size_t rows = 1 + rng() % 12;
    std::string body;
    for (std::size_t r = 0; r < rows; ++r) {
      if (rng() % 8 == 0) body += "\n";  // a blank line
      for (std::size_t c = 0; c < header.size(); ++c) {
        std::string cell = header[c] == "name" ? "street" + std::to_string(r) : number(rng);
        if (rng() % 5 == 0) cell = (rng() % 2 ? " " : "\t") + cell;
        if (rng() % 5 == 0) cell += rng() % 2 ? " " : "\t ";
        if (c) body += ",";
        body += cell;
      }
      if (trial % 2 == 0 && rng() % 10 == 0) {  // one bad row in half the files
        switch (rng() % 3) {
          case 0:
            body += ",7";  // a field too many
            break;
          case 1:
            body.erase(body.rfind(','));  // one too few
            break;
          default:  // a bad cell in a number column
            body.erase(body.rfind(',') + 1);
            body += kBadCells[rng() % std::size(kBadCells)];
            break;
        }
      }
      if (r + 1 < rows || rng() % 2) body += "\n";  // the last line may end without one
    }
    std::string names, quoted;
    for (std::size_t c = 0; c < header.size(); ++c) {
      names += (c ? "," : "") + header[c];
      quoted += (c ? ",\"" : "\"") + header[c] + "\"";
    }
    const std::string plain = files.write(names + "\n" + body);
    const std::string general = files.write(quoted + "\n" + body);
    INFO("trial " << trial << ":\n" << names << "\n" << body);
    const auto locations = [](const std::string& p) {
      return load_locations(p, geometry::ProjectionKind::local_equidistant);
    };
    const std::string a = answer(locations(plain), plain);
    CHECK(a == answer(locations(general), general));
    failures_seen += a.starts_with("error");
    CHECK(answer(load_vectors(plain), plain) == answer(load_vectors(general), general));
    const std::vector<std::string> reversed = {"y", "x"};
    CHECK(
        answer(load_vectors(plain, geometry::ProjectionKind::local_equidistant, reversed), plain) ==
        answer(load_vectors(general, geometry::ProjectionKind::local_equidistant, reversed),
               general));
    CHECK(answer(load_column(plain, "y"), plain) == answer(load_column(general, "y"), general));
  }
  // Both kinds of file met: good ones and bad ones.
  CHECK(failures_seen > 20);
  CHECK(failures_seen < 380);
}

TEST_CASE("data files: a plain file's values are the numbers written", "[experiments][data]") {
  Files files;
  const auto path = files.write("a,b,label\n 1.5 ,\t-2e3,first\n+3,4.25,second\n\n5,6,third");
  const auto data = load_vectors(path);
  REQUIRE(data.has_value());
  CHECK(data->dimension == 2);
  CHECK(data->points == std::vector<double>{1.5, -2000, 3, 4.25, 5, 6});
  const auto column = load_column(path, "b");
  REQUIRE(column.has_value());
  CHECK(*column == std::vector<double>{-2000, 4.25, 6});
  const auto bad = files.write("a,b\n1,2\n3,nan\n");
  const auto refused = load_vectors(bad);
  REQUIRE(!refused.has_value());
  CHECK(refused.error().message.find("row 3, column b: 'nan' is not a finite number") !=
        std::string::npos);
}

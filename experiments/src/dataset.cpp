#include "cgp/experiments/dataset.hpp"

#include <fast_float/fast_float.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string_view>

#include "cgp/common/validate.hpp"
#include "cgp/simulation/synthetic_city.hpp"

namespace cgp::experiments {
namespace {

Error data_error(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::invalid_argument, "data", "data: " + path + ": " + what);
}

// Data is a regular file that says how long it is: a directory, a device (/dev/zero: read until
// out of memory) or a /proc file (size 0, reads that fail) is refused before it is read
// (these once ended in "internal error").
Status require_data_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    return data_error(path, "cannot open the file (missing or unreadable)");
  if (!S_ISREG(info.st_mode))
    return data_error(path, "not a regular file (a directory or a device?)");
  if (info.st_size == 0) return data_error(path, "the file is empty (or a /proc file)");
  return {};
}

// A CSV file read at once: cells are views into its text (or, for the rare cell that needs
// unquoting, into `unquoted`), so a large file costs one buffer and one view per cell.
struct Csv {
  // A vector, not a string: moving a Csv (it is returned in an Expected) must keep the bytes
  // where the views point, and a short std::string keeps them inside the object.
  std::vector<char> text;
  std::deque<std::string> unquoted;  // stable addresses for the views
  std::vector<std::string_view> header;
  std::vector<std::string_view> first_row;  // the first data row's cells
  std::size_t body = 0;                     // where the lines after the header start
  bool plain = false;  // no quotes and no carriage returns anywhere (the usual file)
  std::vector<std::string_view> cells;  // rows × header.size(), once split_rows has run
  std::size_t rows() const noexcept { return header.empty() ? 0 : cells.size() / header.size(); }
  std::string_view at(std::size_t row, std::size_t column) const noexcept {
    return cells[row * header.size() + column];
  }
};

// Splits one line at commas outside double quotes; quotes and carriage returns are dropped and
// spaces and tabs around a cell trimmed.
// A cell without the spaces and tabs around it.
bool blank(char c) {
  return c == ' ' || c == '\t';
}
std::string_view trimmed(std::string_view cell) {
  while (!cell.empty() && blank(cell.front())) cell.remove_prefix(1);
  while (!cell.empty() && blank(cell.back())) cell.remove_suffix(1);
  return cell;
}

void split_csv_line(std::string_view line, Csv& csv, std::vector<std::string_view>& out) {
  std::size_t start = 0;
  bool quoted = false, special = false;  // special: the cell holds '"' or '\r'
  for (std::size_t i = 0; i <= line.size(); ++i) {
    const bool end = i == line.size();
    const char c = end ? ',' : line[i];
    if (c == '"') quoted = !quoted;
    if (c == '"' || c == '\r') special = true;
    if (c != ',' || (quoted && !end)) continue;
    std::string_view cell = line.substr(start, i - start);
    if (special && cell.find_first_of("\"\r") == cell.size() - 1 && cell.back() == '\r') {
      cell.remove_suffix(1);  // a CRLF line's last cell: no copy needed
    } else if (special) {
      std::string& copy = csv.unquoted.emplace_back();
      for (char k : cell)
        if (k != '"' && k != '\r') copy += k;
      cell = copy;
    }
    out.push_back(trimmed(cell));
    start = i + 1;
    special = false;
  }
}

// split_csv_line for a file without quotes or carriage returns: cells end at commas only.
void split_plain_line(std::string_view line, std::vector<std::string_view>& out) {
  const char* cell = line.data();
  const char* const end = cell + line.size();
  const auto view = [](const char* from, const char* to) {
    return std::string_view(from, static_cast<std::size_t>(to - from));
  };
  for (const char* p = cell; p != end; ++p)
    if (*p == ',') {
      out.push_back(trimmed(view(cell, p)));
      cell = p + 1;
    }
  out.push_back(trimmed(view(cell, end)));
}

// One data line's cells: the plain splitter for a plain file, else the general one.
void split_line(std::string_view line, Csv& csv, std::vector<std::string_view>& out) {
  if (csv.plain)
    split_plain_line(line, out);
  else
    split_csv_line(line, csv, out);
}

bool parse_number(std::string_view text, double& out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  // std::from_chars' contract (correctly rounded, the general format), at fast_float's speed.
  auto [ptr, ec] = fast_float::from_chars(begin, end, out);
  return ec == std::errc() && ptr == end && std::isfinite(out);
}

// The file's text, its header and its first data row; the other rows are split by split_rows
// or parsed straight from the text by parse_plain_columns.
Expected<Csv> read_csv(const std::string& path) {
  CGP_RETURN_IF_ERROR(require_data_file(path));
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return data_error(path, "cannot open the file (missing or unreadable)");
  Csv csv;
  // One read of the whole file, not a character at a time (istreambuf_iterator).
  const std::streamoff size = in.tellg();
  if (size <= 0) return data_error(path, "the file is empty");
  csv.text.resize(static_cast<std::size_t>(size));
  in.seekg(0);
  in.read(csv.text.data(), size);
  if (in.gcount() != size) return data_error(path, "cannot read the file");
  const std::string_view text(csv.text.data(), csv.text.size());
  csv.plain = text.find('"') == std::string_view::npos && text.find('\r') == std::string_view::npos;
  const std::size_t header_end = std::min(text.find('\n'), text.size());
  split_csv_line(text.substr(0, header_end), csv, csv.header);
  csv.body = std::min(header_end + 1, text.size());
  for (std::size_t at = csv.body; at < text.size();) {  // the first line with something on it
    const std::size_t newline = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, newline - at);
    at = newline + 1;
    if (line.empty() || line == "\r") continue;
    split_line(line, csv, csv.first_row);
    break;
  }
  if (csv.first_row.empty()) return data_error(path, "no data rows after the header");
  return csv;
}

// Splits every data row into csv.cells.
Status split_rows(Csv& csv, const std::string& path) {
  const std::string_view text(csv.text.data(), csv.text.size());
  // Room for the cells at once: a cell ends at a comma or at the end of a line, so there are at
  // most as many as both together. Capped (64 MiB of views), so that a hostile file of commas
  // still fails by name on its first bad row rather than on the reservation.
  std::size_t ends = 1;
  for (const char c : text.substr(csv.body)) ends += (c == ',') + (c == '\n');
  csv.cells.clear();
  csv.cells.reserve(std::min<std::size_t>(ends, std::size_t{1} << 22));
  std::size_t number = 1, at = csv.body;  // line 1 is the header
  std::vector<std::string_view> row;
  while (at < text.size()) {  // lines as std::getline gives them
    const std::size_t newline = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, newline - at);
    at = newline + 1;
    ++number;
    if (line.empty() || line == "\r") continue;
    row.clear();
    split_line(line, csv, row);
    if (row.size() != csv.header.size())
      return data_error(path, "row " + std::to_string(number) + " has " +
                                  std::to_string(row.size()) + " fields, the header " +
                                  std::to_string(csv.header.size()));
    csv.cells.insert(csv.cells.end(), row.begin(), row.end());
  }
  if (csv.cells.empty()) return data_error(path, "no data rows after the header");
  return {};
}

// The values of `columns` (in that order) of every data row, row-major into `out`, parsed
// straight from the text of a plain file (no cell views: the usual numeric file is read at the
// number parser's speed). Exactly what split_rows and parse_number accept: true when every
// row is; false when the file is not plain or any row is not (a missing field, a cell that is
// not a finite number), and the caller then goes the general way, which names the problem.
bool parse_plain_columns(const Csv& csv, std::span<const int> columns, std::vector<double>& out) {
  if (!csv.plain || columns.empty()) return false;
  const std::size_t fields = csv.header.size(), width = columns.size();
  // slot[c]: where column c's value goes in a row's output (or none).
  constexpr std::size_t kSkip = static_cast<std::size_t>(-1);
  std::vector<std::size_t> slot(fields, kSkip);
  for (std::size_t k = 0; k < width; ++k) {
    const auto c = static_cast<std::size_t>(columns[k]);
    if (c >= fields || slot[c] != kSkip) return false;  // a column asked for twice: general way
    slot[c] = k;
  }
  const char* p = csv.text.data() + csv.body;
  const char* const end = csv.text.data() + csv.text.size();
  out.clear();
  out.reserve(static_cast<std::size_t>(end - p) / (4 * fields) * width);  // a guess
  std::vector<double> row(width);
  while (p < end) {
    if (*p == '\n') {  // an empty line: skipped, as split_rows does
      ++p;
      continue;
    }
    for (std::size_t c = 0; c < fields; ++c) {
      const bool last = c + 1 == fields;
      if (slot[c] == kSkip) {  // to the end of the cell
        while (p < end && *p != ',' && *p != '\n') ++p;
      } else {
        while (p < end && blank(*p)) ++p;
        const char* from = p;
        if (from < end && *from == '+') ++from;  // parse_number's one leading '+'
        double& value = row[slot[c]];
        const auto [ptr, ec] = fast_float::from_chars(from, end, value);
        if (ec != std::errc() || !std::isfinite(value)) return false;
        p = ptr;
        while (p < end && blank(*p)) ++p;
      }
      // The cell must end here: at a comma, or for the last one at the end of the line.
      if (last ? (p < end && *p != '\n') : (p == end || *p != ',')) return false;
      if (p < end) ++p;  // past the comma or the newline
    }
    out.insert(out.end(), row.begin(), row.end());
  }
  return !out.empty();
}

int column_of(const Csv& csv, const std::string& name) {
  for (std::size_t i = 0; i < csv.header.size(); ++i)
    if (csv.header[i] == name) return static_cast<int>(i);
  return -1;
}

// The error for data row r (0-based) whose cell in `column` is not a finite number.
Error not_a_number(const std::string& path, std::size_t r, std::string_view column,
                   std::string_view cell) {
  return data_error(path, "row " + std::to_string(r + 2) + ", column " + std::string(column) +
                              ": '" + std::string(cell) + "' is not a finite number");
}

Expected<std::vector<double>> numeric_column(const Csv& csv, int column, const std::string& path) {
  std::vector<double> values;
  values.reserve(csv.rows());
  for (std::size_t r = 0; r < csv.rows(); ++r) {
    double v;
    const std::string_view cell = csv.at(r, static_cast<std::size_t>(column));
    if (!parse_number(cell, v))
      return not_a_number(path, r, csv.header[static_cast<std::size_t>(column)], cell);
    values.push_back(v);
  }
  return values;
}

}  // namespace

Expected<Dataset> load_locations(const std::string& path, geometry::ProjectionKind projection,
                                 const std::array<double, 2>* origin) {
  CGP_ASSIGN_OR_RETURN(auto csv, read_csv(path));
  const int lon = column_of(csv, "lon"), lat = column_of(csv, "lat");
  const int x = column_of(csv, "x"), y = column_of(csv, "y");
  Dataset data;
  data.dimension = 2;
  // Two columns, straight from the text where the file allows (else cell by cell, which names
  // what is wrong).
  const auto two_columns = [&](int first, int second, std::vector<double>& a,
                               std::vector<double>& b) -> Status {
    const int both[2] = {first, second};
    std::vector<double> pairs;
    if (parse_plain_columns(csv, both, pairs)) {
      a.resize(pairs.size() / 2), b.resize(pairs.size() / 2);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = pairs[2 * i], b[i] = pairs[2 * i + 1];
      return {};
    }
    CGP_RETURN_IF_ERROR(split_rows(csv, path));
    CGP_ASSIGN_OR_RETURN(a, numeric_column(csv, first, path));
    CGP_ASSIGN_OR_RETURN(b, numeric_column(csv, second, path));
    return {};
  };
  if (lon >= 0 && lat >= 0) {
    std::vector<double> lons, lats;
    CGP_RETURN_IF_ERROR(two_columns(lon, lat, lons, lats));
    auto centre = geometry::lonlat_centre(lons, lats);
    if (!centre) return data_error(path, centre.error().message);
    if (origin) *centre = *origin;
    data.origin = *centre;
    auto proj = geometry::LonLatProjection::create(projection, (*centre)[0], (*centre)[1]);
    if (!proj) return data_error(path, proj.error().message);
    data.points.reserve(2 * lons.size());
    for (std::size_t i = 0; i < lons.size(); ++i) {
      auto xy = proj->forward((lons)[i], (lats)[i]);
      if (!xy) return data_error(path, "row " + std::to_string(i + 2) + ": " + xy.error().message);
      data.points.push_back((*xy)[0]);
      data.points.push_back((*xy)[1]);
    }
    data.description = path + ": " + std::to_string(lons.size()) + " lon/lat points, " +
                       std::string(geometry::projection_kind_name(projection)) + " projection";
    return data;
  }
  if (x >= 0 && y >= 0) {
    std::vector<double> xs, ys;
    CGP_RETURN_IF_ERROR(two_columns(x, y, xs, ys));
    data.points.reserve(2 * xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      data.points.push_back((xs)[i]);
      data.points.push_back((ys)[i]);
    }
    data.description = path + ": " + std::to_string(xs.size()) + " x/y points (metres)";
    return data;
  }
  return data_error(
      path, "needs columns lon,lat or x,y (header: " + [&] {
        std::string h;
        for (const auto& c : csv.header) h += (h.empty() ? "" : ",") + std::string(c);
        return h;
      }() + ")");
}

namespace {

// IDX by its magic number (0x00000803, gzip or not), whatever the file is called.
bool looks_like_idx(const std::string& path) {
  if (!require_data_file(path)) return false;  // read_csv names what is wrong
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) return false;
  unsigned char magic[4];
  const bool idx = gzread(file, magic, 4) == 4 && magic[0] == 0 && magic[1] == 0 &&
                   magic[2] == 0x08 && magic[3] == 3;
  gzclose(file);
  return idx;
}

}  // namespace

Expected<Dataset> load_vectors(const std::string& path, geometry::ProjectionKind projection,
                               const std::vector<std::string>& names) {
  if (looks_like_idx(path)) return load_idx(path);
  CGP_ASSIGN_OR_RETURN(auto csv, read_csv(path));
  if (names.empty() && column_of(csv, "lon") >= 0 && column_of(csv, "lat") >= 0)
    return load_locations(path, projection);
  std::vector<int> columns;
  if (!names.empty()) {
    for (const std::string& name : names) {
      const int c = column_of(csv, name);
      if (c < 0) return data_error(path, "no column named '" + name + "' (--columns)");
      columns.push_back(c);
    }
  } else {
    // Every named column whose first row parses as a number.
    if (csv.first_row.size() != csv.header.size()) CGP_RETURN_IF_ERROR(split_rows(csv, path));
    for (std::size_t c = 0; c < csv.header.size(); ++c) {
      const std::string_view name = csv.header[c];
      if (name.empty() || name.starts_with("Unnamed: ")) continue;
      double v;
      if (parse_number(csv.first_row[c], v)) columns.push_back(static_cast<int>(c));
    }
  }
  if (columns.empty()) return data_error(path, "no numeric columns");
  Dataset data;
  data.dimension = columns.size();
  if (parse_plain_columns(csv, columns, data.points)) {
    data.description = path + ": " + std::to_string(data.points.size() / columns.size()) +
                       " vectors of dimension " + std::to_string(data.dimension);
    return data;
  }
  CGP_RETURN_IF_ERROR(split_rows(csv, path));
  // Row by row, as the cells lie in the file (a column at a time would stride over all of them
  // once per column).
  data.points.resize(csv.rows() * columns.size());
  double* point = data.points.data();
  for (std::size_t r = 0; r < csv.rows(); ++r)
    for (int c : columns) {
      const std::string_view cell = csv.at(r, static_cast<std::size_t>(c));
      if (!parse_number(cell, *point++))
        return not_a_number(path, r, csv.header[static_cast<std::size_t>(c)], cell);
    }
  data.description = path + ": " + std::to_string(csv.rows()) + " vectors of dimension " +
                     std::to_string(data.dimension);
  return data;
}

Expected<std::vector<double>> load_column(const std::string& path, const std::string& column) {
  CGP_ASSIGN_OR_RETURN(auto csv, read_csv(path));
  const int index = column_of(csv, column);
  if (index < 0) return data_error(path, "no column named '" + column + "'");
  std::vector<double> values;
  if (parse_plain_columns(csv, std::span<const int>(&index, 1), values)) return values;
  CGP_RETURN_IF_ERROR(split_rows(csv, path));
  return numeric_column(csv, index, path);
}

Expected<Dataset> load_idx(const std::string& path) {
  CGP_RETURN_IF_ERROR(require_data_file(path));
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!file) return data_error(path, "cannot open the file (missing or unreadable)");
  unsigned char header[16];
  const int got = gzread(file, header, 16);
  if (got != 16 || header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != 3) {
    gzclose(file);
    return data_error(path, "not an IDX file of unsigned-byte images (magic 0x00000803)");
  }
  auto be32 = [&](int at) {
    return (std::size_t{header[at]} << 24) | (std::size_t{header[at + 1]} << 16) |
           (std::size_t{header[at + 2]} << 8) | header[at + 3];
  };
  const std::size_t n = be32(4), dimension = be32(8) * be32(12);
  if (n == 0 || dimension == 0 || dimension > 4096) {
    gzclose(file);
    return data_error(path, "IDX sizes out of range");
  }
  // The header's sizes are a claim: read what is there in chunks (never allocating more than
  // was read) and compare in 64 bits.
  const std::uint64_t expected = std::uint64_t{n} * dimension;
  std::vector<unsigned char> raw;
  constexpr unsigned kChunk = 1u << 24;
  while (raw.size() < expected) {
    const auto want = static_cast<unsigned>(std::min<std::uint64_t>(kChunk, expected - raw.size()));
    const std::size_t at = raw.size();
    raw.resize(at + want);
    const int read = gzread(file, raw.data() + at, want);
    if (read <= 0) {
      raw.resize(at);
      break;
    }
    raw.resize(at + static_cast<std::size_t>(read));
  }
  gzclose(file);
  if (raw.size() != expected)
    return data_error(path, "IDX file is truncated: the header announces " +
                                std::to_string(expected) + " bytes of pixels, the file has " +
                                std::to_string(raw.size()));
  Dataset data;
  data.dimension = dimension;
  data.points.assign(raw.begin(), raw.end());
  data.description =
      path + ": " + std::to_string(n) + " images of " + std::to_string(dimension) + " pixels";
  return data;
}

Dataset synthetic_locations(std::size_t users, std::uint64_t seed) {
  return synthetic_locations(0, users, users, seed);
}

Dataset synthetic_locations(std::size_t first, std::size_t count, std::size_t users,
                            std::uint64_t seed) {
  Dataset data;
  data.dimension = 2;
  data.points = simulation::synthetic_city(first, count, seed);
  data.first = first;
  data.total = users;
  data.description = "built-in synthetic city: " + std::to_string(users) +
                     " users, 20 km x 20 km, six hotspots (seed " + std::to_string(seed) + ")";
  return data;
}

Dataset resample(const Dataset& data, std::size_t n, std::uint64_t seed) {
  return resample(data, 0, n, n, seed);
}

Dataset resample(const Dataset& data, std::size_t first, std::size_t count, std::size_t n,
                 std::uint64_t seed) {
  auto mix64 = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  Dataset out;
  out.dimension = data.dimension;
  out.origin = data.origin;
  out.points.reserve(count * data.dimension);
  const std::uint64_t key = mix64(seed ^ 0xd1b54a32d192ed03ULL);
  for (std::size_t i = first; i < first + count; ++i) {
    // The modulo's bias is below size()/2^64: nothing a simulation can see.
    const std::size_t j = mix64(key ^ mix64(i)) % data.size();
    out.points.insert(out.points.end(),
                      data.points.begin() + static_cast<std::ptrdiff_t>(j * data.dimension),
                      data.points.begin() + static_cast<std::ptrdiff_t>((j + 1) * data.dimension));
  }
  out.first = first;
  out.total = n;
  out.description = data.description + ", " + std::to_string(n) + " drawn with replacement";
  return out;
}

}  // namespace cgp::experiments

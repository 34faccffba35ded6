#include "console_assets.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string_view>

namespace cgp::transport::detail {

namespace {
constexpr std::uintmax_t kMaxAssetBytes = 32u << 20;  // Leaflet and the page are far below
}

const char* asset_type(const std::filesystem::path& file) {
  const std::string extension = file.extension().string();
  if (extension == ".html") return "text/html; charset=utf-8";
  if (extension == ".js" || extension == ".mjs") return "text/javascript; charset=utf-8";
  if (extension == ".css") return "text/css; charset=utf-8";
  if (extension == ".json" || extension == ".map") return "application/json";
  if (extension == ".geojson") return "application/geo+json";
  if (extension == ".png") return "image/png";
  if (extension == ".svg") return "image/svg+xml";
  if (extension == ".ico") return "image/x-icon";
  if (extension == ".txt" || extension == ".md") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

Expected<ConsoleAssets> ConsoleAssets::open(const std::string& folder) {
  std::error_code error;
  const auto root = std::filesystem::canonical(folder, error);
  if (error || !std::filesystem::is_directory(root, error))
    return make_error(ErrorCode::invalid_argument, "console_assets",
                      "console_assets: '" + folder + "' is not a folder");
  return ConsoleAssets(root);
}

bool ConsoleAssets::serve(const std::string& path, HttpResponse& response) const {
  std::filesystem::path file = root_;
  std::string_view rest = path == "/" ? std::string_view("/index.html") : std::string_view(path);
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    const auto end = rest.find('/');
    const std::string_view segment = rest.substr(0, end);
    // No dot segments, and no hidden files (a .git or an editor's backup left in the folder).
    if (segment.empty() || segment.front() == '.' || segment.find('\\') != std::string_view::npos)
      return false;
    file /= std::string(segment);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  }
  // A link may lead anywhere: the file's real place must still be inside the folder.
  std::error_code error;
  const auto real = std::filesystem::canonical(file, error);
  if (error || !std::filesystem::is_regular_file(real, error)) return false;
  if (std::mismatch(root_.begin(), root_.end(), real.begin(), real.end()).first != root_.end())
    return false;
  const auto size = std::filesystem::file_size(real, error);
  if (error || size > kMaxAssetBytes) return false;
  std::ifstream in(real, std::ios::binary);
  if (!in) return false;
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) return false;
  response.set_content(std::move(content), asset_type(real));
  return true;
}

}  // namespace cgp::transport::detail

// The console page's static files, served from one folder: a GET path names a regular file
// inside it, never a folder, a dot segment or a link that leads out of it.
#pragma once

#include <filesystem>
#include <string>

#include "cgp/common/expected.hpp"
#include "cgp/common/validate.hpp"
#include "console_http.hpp"

namespace cgp::transport::detail {

class ConsoleAssets {
 public:
  // Errors name "console_assets": not a folder.
  static Expected<ConsoleAssets> open(const std::string& folder);
  // Writes the file `path` names ("/" is index.html) with its type; false when there is none.
  bool serve(const std::string& path, HttpResponse& response) const;

 private:
  explicit ConsoleAssets(std::filesystem::path root) : root_(std::move(root)) {}
  std::filesystem::path root_;  // canonical
};

// The Content-Type of a page file, by its extension.
const char* asset_type(const std::filesystem::path& file);

}  // namespace cgp::transport::detail

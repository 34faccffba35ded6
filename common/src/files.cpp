#include "cgp/common/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cgp/common/validate.hpp"

namespace cgp {
namespace {

Error file_error(ErrorCode code, std::string_view parameter, const std::string& message) {
  return make_error(code, parameter, std::string(parameter) + ": " + message);
}

}  // namespace

Expected<std::string> read_file(const std::string& path, std::string_view parameter,
                                std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO nobody writes to must not hang the program.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return file_error(ErrorCode::invalid_argument, parameter,
                      "cannot open " + path + ": " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode))
    return file_error(ErrorCode::invalid_argument, parameter,
                      path + " is not a regular file (a directory or a device?)");
  if (static_cast<std::size_t>(info.st_size) > max_bytes)
    return file_error(ErrorCode::too_large, parameter,
                      path + " has " + std::to_string(info.st_size) + " bytes, more than the " +
                          std::to_string(max_bytes) + " allowed");
  std::string out(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t filled = 0;
  for (;;) {
    if (filled == out.size()) out.resize(std::min(max_bytes + 1, out.size() + 4096));
    if (filled == out.size()) break;  // grew past max_bytes while being read
    const auto got = ::read(fd, out.data() + filled, out.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return file_error(ErrorCode::invalid_argument, parameter,
                        "cannot read " + path + ": " + std::strerror(errno));
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
  }
  if (filled > max_bytes)
    return file_error(ErrorCode::too_large, parameter,
                      path + " is larger than the " + std::to_string(max_bytes) + " bytes allowed");
  out.resize(filled);
  return out;
}

Expected<std::string> read_secret(const std::string& path, std::string_view parameter) {
  auto text = read_file(path, parameter, kMaxSecretFileBytes);
  if (!text) return text;
  while (!text->empty() && (text->back() == '\n' || text->back() == '\r')) text->pop_back();
  if (text->empty())
    return file_error(ErrorCode::invalid_argument, parameter, path + " holds no credential");
  return text;
}

Status write_private_file(const std::string& path, std::string_view parameter,
                          std::string_view text, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return file_error(ErrorCode::already_exists, parameter,
                        path + " exists; refusing to overwrite it (a key lost is a device lost)");
    return file_error(ErrorCode::invalid_argument, parameter,
                      "cannot create " + path + ": " + std::strerror(errno));
  }
  std::size_t written = 0;
  int error = 0;
  while (written < text.size()) {
    const auto put = ::write(fd, text.data() + written, text.size() - written);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      error = put < 0 ? errno : EIO;
      break;
    }
    written += static_cast<std::size_t>(put);
  }
  // A regular file reaches the disk before we report success (a device's key must survive a crash).
  struct stat info {};
  fstat(fd, &info);
  if (error == 0 && S_ISREG(info.st_mode) && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0 && !overwrite && S_ISREG(info.st_mode)) ::unlink(path.c_str());  // ours, partial
  if (error != 0)
    return file_error(ErrorCode::invalid_argument, parameter,
                      "cannot write " + path + ": " + std::strerror(error));
  return {};
}

}  // namespace cgp

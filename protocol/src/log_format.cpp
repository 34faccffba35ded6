#include "cgp/protocol/log_format.hpp"

#include <grpc/support/log.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp::protocol {
namespace {

std::mutex grpc_log_mutex;
std::function<void(const std::string&)> grpc_log_sink;

void forward_grpc_log(gpr_log_func_args* args) {
  const char* level = args->severity == GPR_LOG_SEVERITY_ERROR  ? "E"
                      : args->severity == GPR_LOG_SEVERITY_INFO ? "I"
                                                                : "D";
  const char* file = args->file ? args->file : "";
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  const std::string line = "event=grpc level=" + std::string(level) + " source=" +
                           log_value(std::string(file) + ":" + std::to_string(args->line)) +
                           " message=" + log_value(args->message ? args->message : "");
  std::lock_guard lock(grpc_log_mutex);
  if (grpc_log_sink) grpc_log_sink(line);
}

}  // namespace

void route_grpc_logs(std::function<void(const std::string&)> sink) {
  const bool routed = static_cast<bool>(sink);
  {
    std::lock_guard lock(grpc_log_mutex);
    grpc_log_sink = std::move(sink);
  }
  // nullptr restores gRPC's default (stderr).
  gpr_set_log_function(routed ? forward_grpc_log : nullptr);
}

Status require_id(std::string_view parameter, std::string_view id) {
  if (id.empty() || id.size() > wire::kMaxIdBytes) {
    return make_error(id.empty() ? ErrorCode::invalid_argument : ErrorCode::too_large, parameter,
                      std::string(parameter) + " must have 1 to " +
                          std::to_string(wire::kMaxIdBytes) + " bytes, got " +
                          std::to_string(id.size()));
  }
  for (std::size_t i = 0; i < id.size(); ++i) {
    if (!wire::is_id_char(static_cast<unsigned char>(id[i]))) {
      return make_error(ErrorCode::invalid_argument, parameter,
                        std::string(parameter) + " may hold only A-Z a-z 0-9 . _ - : @ / +, got " +
                            log_value(id) + " (byte " + std::to_string(i) + ")");
    }
  }
  return {};
}

std::string log_value(std::string_view value) {
  if (value.size() > 256) value = value.substr(0, 256);
  bool plain = !value.empty();
  for (unsigned char c : value) plain = plain && wire::is_id_char(c);
  if (plain) return std::string(value);
  std::string out = "\"";
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace cgp::protocol

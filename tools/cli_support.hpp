// What every program's command line shares: --version, a TOML --config for the daemons, one way
// to report a bad flag (one line, exit 2), and the files a client of the coordinator reads.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgp/common/files.hpp"
#include "cgp/common/version.hpp"

namespace cgp::tools {

// A number flag's range, NaN and ±inf refused: CLI::Range lets NaN through (every comparison
// with it is false), and a NaN ρ once ran as an adaptive query that charged every device.
// `open_low` / `open_high` exclude the ends: (0, 1) is finite_in(0, 1, true, true).
inline CLI::Validator finite_in(double low, double high, bool open_low = false,
                                bool open_high = false) {
  const std::string range = std::string(open_low ? "(" : "[") + CLI::detail::to_string(low) + ", " +
                            CLI::detail::to_string(high) + (open_high ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "not a number: " + text;
        if (!std::isfinite(value)) return "must be a finite number in " + range + ", got " + text;
        const bool below = open_low ? !(value > low) : !(value >= low);
        const bool above = open_high ? !(value < high) : !(value <= high);
        if (below || above) return "must be in " + range + ", got " + text;
        return {};
      },
      "FINITE in " + range);
}

// A program's commands as a table: each row has a name, a description and flags(CLI::App&,
// Arguments&). add_commands declares them all; parsed_command finds the one given.
template <class Command, class Arguments>
std::vector<std::pair<CLI::App*, const Command*>> add_commands(CLI::App& app,
                                                               std::span<const Command> table,
                                                               Arguments& arguments) {
  std::vector<std::pair<CLI::App*, const Command*>> added;
  for (const Command& command : table) {
    auto* sub = app.add_subcommand(command.name, command.description);
    command.flags(*sub, arguments);
    added.emplace_back(sub, &command);
  }
  return added;
}
template <class Command>
const Command* parsed_command(const std::vector<std::pair<CLI::App*, const Command*>>& added) {
  for (const auto& [sub, command] : added)
    if (sub->parsed()) return command;
  return nullptr;
}

// --version always; with `config_file`, --config FILE: every option from a TOML file
// (command-line flags win; unknown keys are errors).
inline void add_common_flags(CLI::App& app, bool config_file) {
  app.set_version_flag("--version", std::string(version_string()));
  if (config_file) {
    app.set_config("--config", "", "TOML file with any of the options (command-line flags win)");
    app.allow_config_extras(false);
  }
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });
}

// A --config file within bounds before CLI11 reads it (a 20 KB file of deeply
// nested sections took 3.1 GB): a regular file of at most 64 KiB, lines of at most 4 KiB, and
// section headers at most 4 deep ([serve] and [a.b.c.d] are fine). What is wrong is named.
inline constexpr std::size_t kMaxConfigBytes = 64 * 1024, kMaxConfigLine = 4096,
                             kMaxConfigDepth = 4;
inline std::optional<std::string> config_file_problem(const std::string& path) {
  auto text = cgp::read_file(path, "--config", kMaxConfigBytes);
  if (!text) return text.error().message;
  std::size_t line_number = 0, begin = 0;
  while (begin < text->size()) {
    std::size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    ++line_number;
    const std::string_view line(text->data() + begin, end - begin);
    if (line.size() > kMaxConfigLine)
      return "--config: line " + std::to_string(line_number) + " is longer than " +
             std::to_string(kMaxConfigLine) + " bytes";
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string_view::npos && line[first] == '[') {
      const auto dots = static_cast<std::size_t>(std::count(line.begin(), line.end(), '.'));
      if (dots + 1 > kMaxConfigDepth)
        return "--config: the section on line " + std::to_string(line_number) +
               " is nested more than " + std::to_string(kMaxConfigDepth) + " deep";
    }
    begin = end + 1;
  }
  return std::nullopt;
}

// Values in a --config file are typed: CLI11 converts "5" (a TOML string) for
// an option that takes a number, so a quoted value for such an option is refused here, naming
// the line and the key. Sections name subcommands ([serve]); keys not found are left to CLI11
// (which refuses unknown keys).
inline std::optional<std::string> config_type_problem(CLI::App& app, const std::string& path) {
  auto text = cgp::read_file(path, "--config", kMaxConfigBytes);
  if (!text) return text.error().message;
  auto trim = [](std::string_view v) {
    const auto first = v.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return std::string_view{};
    return v.substr(first, v.find_last_not_of(" \t\r") - first + 1);
  };
  CLI::App* section = &app;
  std::size_t line_number = 0, begin = 0;
  while (begin < text->size()) {
    std::size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    ++line_number;
    const std::string_view line = trim(std::string_view(*text).substr(begin, end - begin));
    begin = end + 1;
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') {
      const std::string name(trim(line.substr(1, line.find(']') - 1)));
      section = nullptr;
      for (auto* sub : app.get_subcommands([&](CLI::App* a) { return a->get_name() == name; }))
        section = sub;
      continue;
    }
    const auto equals = line.find('=');
    if (section == nullptr || equals == std::string_view::npos) continue;
    const std::string key(trim(line.substr(0, equals)));
    const std::string_view value = trim(line.substr(equals + 1));
    if (value.empty() || (value.front() != '"' && value.front() != '\'')) continue;
    const CLI::Option* option = section->get_option_no_throw("--" + key);
    if (option == nullptr) continue;
    // "UINT", or "UINT:<a validator's description>".
    const std::string full_type = option->get_type_name();
    const std::string type = full_type.substr(0, full_type.find(':'));
    if (type == "INT" || type == "UINT" || type == "FLOAT" || type == "NUMBER")
      return "--config: line " + std::to_string(line_number) + ": " + key +
             " takes a number, not a string (" + std::string(value) + ")";
  }
  return std::nullopt;
}

// Parses the command line. Set: the program is done, with this exit code (0 after --help or
// --version; 2 after a bad flag, reported as "<program>: <what>"; 3 for a --config file out of
// bounds).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const char* program) {
  if (app.get_config_ptr() != nullptr) {
    for (int i = 1; i < argc; ++i) {
      const std::string argument = argv[i];
      std::optional<std::string> path;
      if (argument == "--config" && i + 1 < argc) path = argv[i + 1];
      if (argument.rfind("--config=", 0) == 0) path = argument.substr(9);
      if (!path) continue;
      if (auto problem = config_file_problem(*path)) {
        std::fprintf(stderr, "%s: %s\n", program, problem->c_str());
        return 3;
      }
      if (auto problem = config_type_problem(app, *path)) {
        std::fprintf(stderr, "%s: %s\n", program, problem->c_str());
        return 2;
      }
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
  return std::nullopt;
}

// --credential (a secret file) and --tls-root (PEM) of a client of the coordinator, each when
// given. A file that cannot be read is reported by its flag: the error, for exit 3.
inline std::optional<Error> read_client_files(const std::string& credential_file,
                                              const std::string& tls_root_file,
                                              std::string& credential, std::string& tls_root) {
  if (!credential_file.empty()) {
    auto secret = cgp::read_secret(credential_file, "--credential");
    if (!secret) return secret.error();
    credential = std::move(*secret);
  }
  if (!tls_root_file.empty()) {
    auto root = cgp::read_file(tls_root_file, "--tls-root");
    if (!root) return root.error();
    tls_root = std::move(*root);
  }
  return std::nullopt;
}

}  // namespace cgp::tools

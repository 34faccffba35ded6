// What every program's command line shares: --version, a TOML --config for the daemons, one way
// to report a bad flag (one line, exit 2), and the files a client of the coordinator reads.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cgp/common/version.hpp"
#include "cgp/transport/files.hpp"

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

// Parses the command line. Set: the program is done, with this exit code (0 after --help or
// --version; 2 after a bad flag, reported as "<program>: <what>").
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const char* program) {
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
    auto secret = transport::read_secret(credential_file, "--credential");
    if (!secret) return secret.error();
    credential = std::move(*secret);
  }
  if (!tls_root_file.empty()) {
    auto root = transport::read_file(tls_root_file, "--tls-root");
    if (!root) return root.error();
    tls_root = std::move(*root);
  }
  return std::nullopt;
}

}  // namespace cgp::tools

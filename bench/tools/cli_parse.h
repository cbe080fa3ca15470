// Command-line parsing for trainlab's executables (trainlab, bench_ladder, bench_report): the same
// contract everywhere. Include only from a main's own source: it needs CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>

namespace trainlab {

// Parses argv. --help and --version print and yield exit status 0; bad input prints one line,
// "<tool>: error: ..." (never a usage dump), and yields 2; a good parse yields nothing.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string message = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // An unknown flag or a stray value: say which flags the command being parsed takes.
      CLI::App* scope = &app;
      for (CLI::App* sub : app.get_subcommands()) scope = sub;
      std::string allowed;
      for (const CLI::Option* option : scope->get_options()) {
        const std::string name = option->get_name();
        if (!name.empty()) allowed += (allowed.empty() ? "" : ", ") + name;
      }
      if (!allowed.empty()) message += "; allowed: " + allowed;
    }
    for (auto& c : message) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", tool, message.c_str(), tool);
    return 2;
  }
  return std::nullopt;
}

}  // namespace trainlab

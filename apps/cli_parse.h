// Command-line parsing for trainlab's executables (trainlab, bench_ladder, bench_report): the same
// contract everywhere. Include only from a main's own source: it needs CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace trainlab {

// CLI::Range, NaN-safe: CLI11's range compares a double with its bounds, and NaN compares false
// with everything, so `--stall-factor nan` passed every range. The same bounds and help text;
// a NaN or an infinity is refused, naming the value and what is allowed.
class FiniteRange : public CLI::Validator {
 public:
  template <typename T>
  FiniteRange(T lo, T hi) {
    const CLI::Range range(lo, hi);
    const std::string allowed = range.get_description();
    description(allowed);
    func_ = [range, allowed](std::string& input) {
      double value = 0;
      if (CLI::detail::lexical_cast(input, value) && !std::isfinite(value)) {
        return "Value " + input + " is not a finite number (allowed: " + allowed + ")";
      }
      return range(input);
    };
  }
};

// A decimal integer in [0, max] and nothing else: CLI11 reads "-1", "2^64" and "1e23" into an
// unsigned 64-bit option as 2^64-1 and "" as 0 (make-dataset --seed took them all).
inline CLI::Validator StrictUnsigned(std::uint64_t max) {
  return CLI::Validator(
      [max](std::string& input) -> std::string {
        const std::string allowed = "a decimal integer in [0, " + std::to_string(max) + "]";
        if (input.empty() || input.size() > 20 || input.find_first_not_of("0123456789") != std::string::npos)
          return "Value '" + input + "' is not " + allowed;
        errno = 0;
        const unsigned long long v = std::strtoull(input.c_str(), nullptr, 10);
        if (errno == ERANGE || v > max) return "Value " + input + " is not " + allowed;
        return std::string();
      },
      "UINT in [0 - " + std::to_string(max) + "]");
}

// A path that must name something: an empty value ("--ledger ''") is refused, never read as "no
// file" (bench_allreduce --ledger '' --write-tuning '' exited 0 having written nothing).
inline CLI::Validator NonEmptyPath() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        return input.empty() ? std::string("an empty path: name a file (leave the option out for its default)")
                             : std::string();
      },
      "PATH");
}

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

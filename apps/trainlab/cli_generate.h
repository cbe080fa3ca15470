// `trainlab generate`: text sampled from a token model's checkpoint (engine/train/generate.h).
// Registered on the trainlab app by cli.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/train/generate.h"

namespace trainlab {

struct GenerateCommand {
  CLI::App* command = nullptr;
  std::string checkpoint, prompt = "\n", backend;
  GenerateOptions options;
};
GenerateCommand add_generate(CLI::App& app);
int run_generate(const GenerateCommand& c);

}  // namespace trainlab

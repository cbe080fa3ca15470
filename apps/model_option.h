// --model NAME and --model-options key=value,... for every executable that trains or measures a
// registered model (engine/nn/model_registry.h): trainlab's commands, the bench tools and the study
// drivers declare the pair with one call, so each reads, checks and refuses them the same way. Include
// only from a main's own source (it needs CLI11), as apps/cli_parse.h.
//
// Everything is refused while the command line is parsed, before any work, in one line (through
// parse_command_line: "<tool>: error: --model: unknown model 'x' (registered: smallcnn | mlp)"):
// a name that is not registered, text that is not key=value,..., and a key the chosen model does
// not have. A value out of a key's range is the model's to refuse, when it is built (build_model).
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <string>

#include "engine/nn/model_registry.h"
#include "engine/train/config.h"

namespace trainlab {

// The two options as declared, to ask whether either was given (a tool whose configuration comes
// from a file replaces the file's model only then).
struct ModelFlags {
  CLI::Option* model = nullptr;
  CLI::Option* options = nullptr;
  bool given() const { return model->count() > 0 || options->count() > 0; }
};

// A registered model's name or title (a checkpoint's "SmallCNN"), replaced by its name.
inline CLI::Validator RegisteredModel() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        try {
          input = find_model(input).name;
        } catch (const std::exception& e) {
          return e.what();
        }
        return std::string();
      },
      "");
}

// Declares --model (into `name`; its default stays what `name` holds) and --model-options (parsed into
// `options`, then its keys checked against the model --model chose). `help`: what the model is to
// this command ("" for the train config's words).
inline ModelFlags add_model_options(CLI::App& command, std::string& name, ModelOptions& options,
                                    const std::string& help = "") {
  ModelFlags flags;
  flags.model =
      command
          .add_option("--model", name,
                      (help.empty() ? config_field("model").help : help) + " [" + registered_model_names() + "]")
          ->transform(RegisteredModel())
          ->capture_default_str();
  // CLI11 runs the options' callbacks in the order they were declared, after the whole command line
  // is read: --model's value is in `name` by the time its keys are checked here.
  flags.options = command
                      .add_option_function<std::string>(
                          "--model-options",
                          [&name, &options](const std::string& text) {
                            try {
                              options = parse_model_options(text);
                              check_model_keys(find_model(name), options);
                            } catch (const std::exception& e) {
                              throw CLI::ValidationError("--model-options", e.what());
                            }
                          },
                          config_field("model_options").help)
                      ->type_name("KEY=VALUE,...");
  return flags;
}

inline ModelFlags add_model_options(CLI::App& command, ModelConfig& model, const std::string& help = "") {
  return add_model_options(command, model.name, model.options, help);
}

}  // namespace trainlab

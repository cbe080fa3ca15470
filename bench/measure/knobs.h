// A configuration as text: config keys to values in their own words (a ladder's base and rungs, a
// cost study's base and configurations, a ledger row's record of what ran). Parsed through the
// config table (engine/train/config.h), so errors name where the text came from, the key and the value.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <string>

#include "engine/train/config.h"

namespace trainlab::bench {

using KnobMap = std::map<std::string, std::string>;  // config key -> value, as text
// A KnobMap parsed through the config table (errors name `origin`, the key and the value), and a
// config as text (for ledger rows).
TrainConfig config_from(const KnobMap& knobs, const std::string& origin);
KnobMap knobs_of(const TrainConfig& config);
// A YAML map of config keys to values (errors name `where`).
KnobMap yaml_map(const YAML::Node& node, const std::string& where);

// The model of a tool's --model and --model-options on top of a file's configuration (a ladder's or
// a cost study's base): both keys replace the file's; a token model's base loses decode_cost
// (SyntheticImages' stand-in for decoding: token windows are not decoded).
void use_model(KnobMap& knobs, const ModelConfig& model);
// A model as printouts and reports name it: its registered title and its own keys, "SmallCNN",
// "MLP (hidden=64)" (a name no longer registered, from an old row, as it is).
std::string model_label(const std::string& name, const std::string& options_text = "");
std::string model_label(const ModelConfig& model);
// The model built for its default input on the reference backend, from a fixed seed: a probe of what
// it is (the ops it runs, the recompute levels it takes), never trained. Throws Error as build_model.
std::shared_ptr<Module> probe_model(const ModelConfig& model);
// Why the PyTorch DDP peer (bench/peers/torch_ddp.py: the twins of SmallCNN, as shipped, and of
// ResNet, with any of its keys) cannot stand beside a run of `model`; "" when it can.
std::string ddp_peer_mismatch(const ModelConfig& model);
// torch_ddp.py's arguments for that twin: " --model resnet --model-options 'depth=3,width=16'".
std::string ddp_peer_model_args(const ModelConfig& model);

}  // namespace trainlab::bench

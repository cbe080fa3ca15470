// The safetensors file format (as the Python `safetensors` package writes it): an 8-byte
// little-endian header length N, N bytes of JSON header (padded with spaces to a multiple of 8)
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" map of strings, then the raw little-endian tensor bytes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/core/state_dict.h"

namespace trainlab {

struct SafetensorsContents {
  NamedTensors tensors;  // in file offset order
  std::map<std::string, std::string> metadata;
};

std::vector<unsigned char> encode_safetensors(const NamedTensors& tensors,
                                              const std::map<std::string, std::string>& metadata = {});
// Parses and validates everything (header length, JSON, dtypes, shapes, offsets that tile the
// data exactly); errors name `source` (a path, usually) and the problem.
SafetensorsContents decode_safetensors(const unsigned char* data, std::size_t size, const std::string& source,
                                       Backend& backend);

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});
SafetensorsContents read_safetensors(const std::string& path, Backend& backend);

}  // namespace trainlab

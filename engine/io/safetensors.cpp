#include "engine/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/io/fileio.h"

namespace trainlab {

namespace {
using json = nlohmann::json;

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i64:
      return "I64";
  }
  return "?";
}

DType parse_safetensors_dtype(const std::string& name, const std::string& where) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64}) {
    if (name == safetensors_dtype(d)) return d;
  }
  throw Error(where + ": unsupported dtype '" + name + "' (supported: F32, F64, BF16, F16, I64)");
}

constexpr std::size_t kMaxHeaderBytes = 100'000'000;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is this host");
}  // namespace

std::vector<unsigned char> encode_safetensors(const NamedTensors& tensors,
                                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    TL_CHECK(name != "__metadata__" && !name.empty(), "safetensors: invalid tensor name '" + name + "'");
    TL_CHECK(names.insert(name).second, "safetensors: tensor name '" + name + "' appears twice");
    const std::uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::vector<unsigned char> out(8 + text.size() + offset);
  const std::uint64_t header_size = text.size();
  std::memcpy(out.data(), &header_size, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  unsigned char* data = out.data() + 8 + text.size();
  for (const auto& [name, tensor] : tensors) {
    tensor.copy_to_host(data);
    data += tensor.nbytes();
  }
  return out;
}

SafetensorsContents decode_safetensors(const unsigned char* data, std::size_t size, const std::string& source,
                                       Backend& backend) {
  TL_CHECK(size >= 8, source + ": truncated safetensors file (" + std::to_string(size) +
                          " bytes, less than the 8-byte header length)");
  std::uint64_t header_size;
  std::memcpy(&header_size, data, 8);
  TL_CHECK(header_size <= size - 8, source + ": truncated safetensors file (header says " +
                                        std::to_string(header_size) + " header bytes, the file has " +
                                        std::to_string(size - 8) + " after the length)");
  // Flat by specification: {name: {"dtype", "shape": [...], "data_offsets": [...]}}, three levels;
  // the size bound is the Python/Rust reader's (100 MB).
  check_json_bounds(reinterpret_cast<const char*>(data + 8), static_cast<std::size_t>(header_size), 3, kMaxHeaderBytes,
                    source + ": safetensors header");
  json header;
  try {
    header = json::parse(data + 8, data + 8 + header_size);
  } catch (const json::exception& e) {
    throw Error(source + ": corrupted safetensors header (invalid JSON: " + e.what() + ")");
  }
  TL_CHECK(header.is_object(), source + ": corrupted safetensors header (not a JSON object)");
  const std::uint64_t data_size = size - 8 - header_size;
  const unsigned char* payload = data + 8 + header_size;

  SafetensorsContents contents;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> entries;
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        TL_CHECK(it->is_object(), source + ": __metadata__ must be a map of strings");
        for (auto m = it->begin(); m != it->end(); ++m) {
          TL_CHECK(m->is_string(), source + ": __metadata__ value '" + m.key() + "' is not a string");
          contents.metadata[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const std::string where = source + ": tensor '" + it.key() + "'";
      TL_CHECK(it->is_object() && it->contains("dtype") && it->contains("shape") && it->contains("data_offsets"),
               where + " lacks dtype, shape or data_offsets");
      Entry e;
      e.name = it.key();
      e.dtype = parse_safetensors_dtype((*it)["dtype"].get<std::string>(), where);
      TL_CHECK((*it)["shape"].is_array(), where + " has an invalid shape " + (*it)["shape"].dump());
      for (const auto& d : (*it)["shape"]) {
        TL_CHECK(d.is_number_unsigned() && d.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX),
                 where + " has an invalid shape " + (*it)["shape"].dump());
        e.shape.push_back(d.get<std::int64_t>());
      }
      const auto& offsets = (*it)["data_offsets"];
      TL_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               where + " has invalid data_offsets " + offsets.dump());
      e.begin = offsets[0].get<std::uint64_t>();
      e.end = offsets[1].get<std::uint64_t>();
      TL_CHECK(e.begin <= e.end && e.end <= data_size, where + " has data_offsets [" + std::to_string(e.begin) + ", " +
                                                           std::to_string(e.end) + "] outside the " +
                                                           std::to_string(data_size) + " data bytes (truncated file?)");
      std::int64_t numel = 0;
      try {
        numel = shape_numel(e.shape);
      } catch (const Error& error) {
        throw Error(where + ": " + error.what());
      }
      std::uint64_t expected = 0;
      TL_CHECK(!__builtin_mul_overflow(static_cast<std::uint64_t>(numel), dtype_size(e.dtype), &expected),
               where + " has a shape too large for any file " + shape_str(e.shape));
      TL_CHECK(e.end - e.begin == expected, where + " holds " + std::to_string(e.end - e.begin) + " bytes, its shape " +
                                                shape_str(e.shape) + " and dtype need " + std::to_string(expected));
      entries.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    throw Error(source + ": corrupted safetensors header (" + e.what() + ")");
  }
  // The tensors must tile the data section exactly: no overlap, no gap, nothing trailing.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  std::uint64_t cursor = 0;
  for (const auto& e : entries) {
    TL_CHECK(e.begin == cursor, source + ": tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) +
                                    ", expected " + std::to_string(cursor) + " (overlapping or missing data)");
    cursor = e.end;
  }
  TL_CHECK(cursor == data_size, source + ": " + std::to_string(data_size - cursor) +
                                    " bytes after the last tensor (the header does not describe the file)");
  for (const auto& e : entries) {
    contents.tensors.emplace_back(e.name, Tensor::from_host(payload + e.begin, e.shape, e.dtype, backend));
  }
  return contents;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const auto bytes = encode_safetensors(tensors, metadata);
  write_file_atomic(path, bytes.data(), bytes.size());
}

SafetensorsContents read_safetensors(const std::string& path, Backend& backend) {
  const auto bytes = read_file(path);
  return decode_safetensors(bytes.data(), bytes.size(), path, backend);
}

}  // namespace trainlab

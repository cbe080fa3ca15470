// Small file utilities for durable, checkable writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainlab {

// Writes `bytes` to `path` so that a crash leaves either the old file or the complete new one:
// a temporary file in the same directory, fsync, rename over `path`, fsync of the directory.
void write_file_atomic(const std::string& path, const void* bytes, std::size_t size);
void write_file_atomic(const std::string& path, const std::string& text);
// The whole file; throws Error naming the path when it cannot be read.
std::vector<unsigned char> read_file(const std::string& path);
void fsync_directory(const std::string& dir);

// CRC-32 (IEEE 802.3, the zlib/PNG polynomial).
std::uint32_t crc32(const void* data, std::size_t size);
std::string crc32_hex(std::uint32_t crc);

}  // namespace trainlab

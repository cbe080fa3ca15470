// Small file utilities for durable, checkable writes and bounded reads.
//
// Output paths (traces, checkpoints' files, grad-dump --out, reports, the README section) follow
// one rule, so that no output ever replaces something that was not ours:
//   - a path that does not exist, or names a regular file, is written atomically: a temporary
//     file in the same directory, fsync, rename over it, fsync of the directory;
//   - a symlink is followed: the link stays, and the file it points to is written by the same rule
//     (a link to a character device is written in place, a link to a directory is refused);
//   - a character device (/dev/null) or a FIFO is written in place, never replaced; a FIFO must
//     have a reader already (otherwise the write would hang), and /dev/stdout, /dev/stderr,
//     /dev/fd/N and /proc/self/fd/N write to this process's own open descriptor;
//   - a directory, a socket or a block device is refused, naming the path and its type.
// check_output_file applies the same rule without writing, so a tool can refuse a bad path before
// the run rather than after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/host_memory.h"

namespace trainlab {

// Writes `bytes` to `path` by the rule above: a crash leaves either the old file or the complete
// new one. Throws Error naming the path when it cannot.
void write_file_atomic(const std::string& path, const void* bytes, std::size_t size);
void write_file_atomic(const std::string& path, const std::string& text);
// Throws Error (naming `what`, e.g. "--trace", and the path) unless write_file_atomic could write
// `path`: refuses a directory, a socket, a block device, a loop of links, and a parent that exists
// but is not a directory. Writes nothing.
void check_output_file(const std::string& path, const std::string& what);
// Whether write_file_atomic would write `path` as a regular file (a new one, or one it replaces)
// rather than in place into a device, a FIFO or a descriptor: an output that brings files of its own
// beside it (a report's figures) writes them only then. Errors as check_output_file.
bool output_is_file(const std::string& path);
// Throws Error when `output` is the same file as one of `inputs` (after links: the same device and
// inode), naming both: no tool writes over what it reads (bench_report --out L --ledger L would
// have replaced the ledger with its report). Inputs that do not exist are passed by.
void check_output_is_not_input(const std::string& output, const std::string& output_what,
                               const std::vector<std::pair<std::string, std::string>>& inputs);
// The file a path names once symlinks are followed (the path itself when it is not a link; a
// dangling link's target). Throws Error on a loop of links.
std::string follow_symlinks(const std::string& path);

// The whole file, at most `max_bytes` of it. Refuses, before reading anything, a path that is not
// a regular file (a FIFO would hang, /dev/zero never ends) or is larger than `max_bytes`; errors
// name the path, its size or type, and the limit.
std::vector<unsigned char> read_file(const std::string& path, std::uint64_t max_bytes);
// Unbounded except by the memory this machine has (the limit is its physical memory).
std::vector<unsigned char> read_file(const std::string& path);
// The size of a regular file; throws Error naming the path and its type if it is anything else.
std::uint64_t regular_file_size(const std::string& path);
void fsync_directory(const std::string& dir);

// JSON inputs are bounded before any parser sees them: nlohmann's parser recurses per nesting
// level (100,000 levels overflow the stack). Throws Error naming `source` when the text nests
// objects and arrays deeper than `max_depth` or is longer than `max_bytes`. Strings are skipped
// (brackets inside them do not count).
void check_json_bounds(const char* text, std::size_t size, int max_depth, std::size_t max_bytes,
                       const std::string& source);

// Throws Error when `bytes` (what `what` needs) exceeds the memory available now on the host,
// saying how much is needed and how much there is. `hint` is appended (e.g. "use a smaller --size").
void check_host_memory(std::uint64_t bytes, const std::string& what, const std::string& hint);

// CRC-32 (IEEE 802.3, the zlib/PNG polynomial; zlib's implementation). `previous` continues a
// running CRC: crc32(b, nb, crc32(a, na)) is the CRC of a followed by b.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t previous = 0);
std::string crc32_hex(std::uint32_t crc);

// Whether a process with this id is running (kill(pid, 0)); a process we may not signal counts as
// running.
bool process_alive(long pid);
// What is at `path`, links followed: "a regular file", "a directory", "a FIFO", ... or "missing".
std::string file_kind(const std::string& path);

}  // namespace trainlab

#include "engine/fileio.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "backends/error.h"

namespace trainlab {

namespace {
std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* bytes, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write '" + path + "': " + errno_text());
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}
}  // namespace

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error("cannot open directory '" + dir + "' to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  ::close(fd);
  // Some filesystems cannot sync a directory (EINVAL); anything else means the rename may be lost.
  if (rc != 0 && fsync_errno != EINVAL) {
    throw Error("cannot sync directory '" + dir + "': " + std::strerror(fsync_errno));
  }
}

void write_file_atomic(const std::string& path, const void* bytes, std::size_t size) {
  const std::filesystem::path target(path);
  const std::string dir = target.parent_path().string();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create '" + tmp + "': " + errno_text());
  try {
    write_all(fd, bytes, size, tmp);
    if (::fsync(fd) != 0) throw Error("cannot sync '" + tmp + "': " + errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
  fsync_directory(dir);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot open '" + path + "': " + errno_text());
  std::vector<unsigned char> data;
  unsigned char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) data.insert(data.end(), buffer, buffer + n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw Error("cannot read '" + path + "'");
  return data;
}

std::uint32_t crc32(const void* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

std::string crc32_hex(std::uint32_t crc) {
  char buffer[9];
  std::snprintf(buffer, sizeof buffer, "%08x", crc);
  return buffer;
}

}  // namespace trainlab

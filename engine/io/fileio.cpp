#include "engine/io/fileio.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>

#include <zlib.h>

#include "backends/error.h"
#include "backends/host_memory.h"

namespace trainlab {

namespace fs = std::filesystem;

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

// This process's own descriptors by name: writing to them means writing to the open descriptor
// (at its offset), never re-opening what it points to.
int self_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p(prefix);
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0) {
      const std::string digits = path.substr(p.size());
      if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
      return std::stoi(digits);
    }
  }
  return -1;
}

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "a special file";
}

// Where an output goes, once symlinks are followed.
struct OutputTarget {
  enum Kind { create, replace, in_place, descriptor } kind = create;
  std::string path;  // the file written (create/replace/in_place)
  int fd = -1;       // descriptor
  bool fifo = false;
  mode_t mode = 0644;
};

OutputTarget resolve_output(const std::string& path, const std::string& what) {
  const std::string who = what.empty() ? "'" + path + "'" : what + " '" + path + "'";
  TL_CHECK(!path.empty(), (what.empty() ? std::string("output") : what) + ": the path is empty");
  std::string p = path;
  for (int hop = 0;; ++hop) {
    TL_CHECK(hop < 40, "cannot write " + who + ": too many levels of symbolic links");
    if (const int fd = self_descriptor(p); fd >= 0) {
      struct stat st {};
      TL_CHECK(::fstat(fd, &st) == 0, "cannot write " + who + ": descriptor " + std::to_string(fd) + " is not open");
      TL_CHECK(!S_ISDIR(st.st_mode), "cannot write " + who + ": it is a directory");
      OutputTarget target;
      target.kind = OutputTarget::descriptor;
      target.fd = fd;
      target.path = p;
      return target;
    }
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      TL_CHECK(errno == ENOENT || errno == ENOTDIR, "cannot write " + who + ": " + errno_text());
      // A new file: its nearest existing ancestor must be a directory (the rest is created).
      fs::path parent = fs::path(p).parent_path();
      while (!parent.empty()) {
        struct stat pst {};
        if (::stat(parent.c_str(), &pst) == 0) {
          TL_CHECK(S_ISDIR(pst.st_mode), "cannot write " + who + ": '" + parent.string() + "' is " +
                                             file_type_name(pst.st_mode) + ", not a directory");
          break;
        }
        if (parent == parent.parent_path()) break;
        parent = parent.parent_path();
      }
      OutputTarget target;
      target.path = p;
      return target;
    }
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path link = fs::read_symlink(p, ec);
      TL_CHECK(!ec, "cannot write " + who + ": cannot read the link '" + p + "': " + ec.message());
      p = link.is_absolute() ? link.string() : (fs::path(p).parent_path() / link).string();
      continue;
    }
    OutputTarget target;
    target.path = p;
    target.mode = st.st_mode & 07777;
    if (S_ISREG(st.st_mode)) {
      target.kind = OutputTarget::replace;
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      target.kind = OutputTarget::in_place;
      target.fifo = S_ISFIFO(st.st_mode);
    } else {
      throw Error("cannot write " + who + (p == path ? "" : " (a link to '" + p + "')") + ": it is " +
                  file_type_name(st.st_mode) +
                  "; an output is a file (replaced atomically), a character device or a FIFO (written in place)");
    }
    return target;
  }
}

void write_in_place(const OutputTarget& target, const void* bytes, std::size_t size) {
  if (target.kind == OutputTarget::descriptor) {
    write_all(target.fd, bytes, size, target.path);
    return;
  }
  // A FIFO without a reader would block this open forever: O_NONBLOCK makes it fail instead.
  const int fd = ::open(target.path.c_str(), O_WRONLY | O_CLOEXEC | (target.fifo ? O_NONBLOCK : 0));
  if (fd < 0) {
    if (errno == ENXIO) throw Error("cannot write '" + target.path + "': the FIFO has no reader");
    throw Error("cannot open '" + target.path + "' for writing: " + errno_text());
  }
  if (target.fifo) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  try {
    write_all(fd, bytes, size, target.path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
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

std::string follow_symlinks(const std::string& path) {
  std::string p = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return p;
    p = link.is_absolute() ? link.string() : (fs::path(p).parent_path() / link).string();
  }
  throw Error("'" + path + "': too many levels of symbolic links");
}

void check_output_file(const std::string& path, const std::string& what) { resolve_output(path, what); }

bool output_is_file(const std::string& path) {
  const OutputTarget target = resolve_output(path, "");
  return target.kind != OutputTarget::in_place && target.kind != OutputTarget::descriptor;
}

void check_output_is_not_input(const std::string& output, const std::string& output_what,
                               const std::vector<std::pair<std::string, std::string>>& inputs) {
  struct stat out {};
  if (output.empty() || ::stat(output.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return;  // new, or in place
  for (const auto& [input, input_what] : inputs) {
    struct stat in {};
    if (input.empty() || ::stat(input.c_str(), &in) != 0) continue;
    TL_CHECK(!(in.st_dev == out.st_dev && in.st_ino == out.st_ino),
             output_what + " '" + output + "' is the same file as " + input_what + " '" + input +
                 "': it would be written over what is read; name another output");
  }
}

void write_file_atomic(const std::string& path, const void* bytes, std::size_t size) {
  const OutputTarget target = resolve_output(path, "");
  if (target.kind == OutputTarget::in_place || target.kind == OutputTarget::descriptor) {
    write_in_place(target, bytes, size);
    return;
  }
  const fs::path file(target.path);
  const std::string dir = file.parent_path().string();
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    TL_CHECK(!ec, "cannot create directory '" + dir + "' for '" + path + "': " + ec.message());
  }
  const std::string tmp = target.path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create '" + tmp + "': " + errno_text());
  try {
    if (target.kind == OutputTarget::replace) ::fchmod(fd, target.mode);  // keep the file's permissions
    write_all(fd, bytes, size, tmp);
    if (::fsync(fd) != 0) throw Error("cannot sync '" + tmp + "': " + errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), target.path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + target.path + "': " + why);
  }
  fsync_directory(dir);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

std::uint64_t regular_file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("cannot open '" + path + "': " + errno_text());
  TL_CHECK(S_ISREG(st.st_mode), "'" + path + "' is " + file_type_name(st.st_mode) + ", not a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

std::vector<unsigned char> read_file(const std::string& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the open file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string type = file_type_name(st.st_mode);
    ::close(fd);
    throw Error("'" + path + "' is " + type + ", not a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    throw Error("'" + path + "' is " + human_size(size) + ", more than the " + human_size(max_bytes) +
                " such a file may hold");
  }
  std::vector<unsigned char> data;
  try {
    data.resize(static_cast<std::size_t>(size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw Error(allocation_failure("reading '" + path + "'", size));
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "it shrank while being read";
      ::close(fd);
      throw Error("cannot read '" + path + "': " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return data;
}

std::vector<unsigned char> read_file(const std::string& path) {
  const std::uint64_t total = host_memory_total_bytes();
  return read_file(path, total > 0 ? total : ~std::uint64_t{0});
}

void check_json_bounds(const char* text, std::size_t size, int max_depth, std::size_t max_bytes,
                       const std::string& source) {
  TL_CHECK(size <= max_bytes,
           source + ": " + human_size(size) + " of JSON, more than the " + human_size(max_bytes) + " allowed");
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < size; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      TL_CHECK(++depth <= max_depth, source + ": JSON nested more than " + std::to_string(max_depth) +
                                         " levels deep (at byte " + std::to_string(i) + ")");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

void check_host_memory(std::uint64_t bytes, const std::string& what, const std::string& hint) {
  const std::uint64_t available = host_memory_available_bytes();
  TL_CHECK(available == 0 || bytes <= available, what + " needs " + human_size(bytes) + " of memory; " +
                                                     human_size(available) + " is available on this machine" +
                                                     (hint.empty() ? "" : " (" + hint + ")"));
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t previous) {
  const auto* p = static_cast<const unsigned char*>(data);
  uLong crc = previous;
  // zlib takes a uInt length: feed it in pieces below 4 GiB.
  while (size > 0) {
    const auto piece = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    crc = ::crc32(crc, p, piece);
    p += piece;
    size -= piece;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string crc32_hex(std::uint32_t crc) {
  char buffer[9];
  std::snprintf(buffer, sizeof buffer, "%08x", crc);
  return buffer;
}

std::string file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return file_type_name(st.st_mode);
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

}  // namespace trainlab

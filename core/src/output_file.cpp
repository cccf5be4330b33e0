#include "cephalo/core/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>

#include "cephalo/core/error.hpp"

namespace cephalo {
namespace fs = std::filesystem;
namespace {

struct InputFile {
  dev_t device;
  ino_t inode;
  std::string name;  // as it was read, for the message
};

std::mutex& inputs_mutex() {
  static std::mutex m;
  return m;
}
std::vector<InputFile>& inputs() {
  static std::vector<InputFile> files;
  return files;
}

// The input `st` is, if any.
std::optional<std::string> input_named(const struct stat& st) {
  std::lock_guard<std::mutex> lock(inputs_mutex());
  for (const auto& f : inputs())
    if (f.device == st.st_dev && f.inode == st.st_ino) return f.name;
  return std::nullopt;
}

std::string label(const fs::path& file, const std::string& what) {
  return what.empty() ? file.string() : what + " " + file.string();
}

[[noreturn]] void refuse(const fs::path& file, const std::string& what, const std::string& why) {
  throw IoError(label(file, what) + ": " + why);
}

std::string errno_text(int err) { return std::strerror(err); }

// The longest file name (one path component) the file systems we write to accept: NAME_MAX.
constexpr std::size_t kMaxFileNameBytes = 255;

// Where an output really goes: the file itself, or the end of its chain of symlinks.
enum class Kind { Missing, Regular, CharDevice, Fifo };
struct Target {
  fs::path path;
  Kind kind = Kind::Missing;
  struct stat st {};
};

// Follows the chain of symlinks at `path` to its end (a file, or a name that does not exist).
fs::path follow_links(const fs::path& file, const std::string& what) {
  fs::path path = file;
  struct stat st {};
  for (int hops = 0; ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode); ++hops) {
    if (hops == 40) refuse(file, what, "too many levels of symbolic links");
    std::error_code ec;
    fs::path link = fs::read_symlink(path, ec);
    if (ec) refuse(file, what, "cannot read symbolic link: " + ec.message());
    path = link.is_absolute() ? link : path.parent_path() / link;
  }
  return path;
}

Target resolve(const fs::path& file, const std::string& what) {
  if (file.empty()) refuse(file, what, "empty file name");
  Target t;
  t.path = file;
  if (::stat(t.path.c_str(), &t.st) != 0) {
    if (errno != ENOENT) refuse(file, what, "cannot be examined: " + errno_text(errno));
    t.path = follow_links(file, what);  // a dangling link creates its target
    return t;                           // Missing (its folder is checked by the caller)
  }
  const mode_t m = t.st.st_mode;
  // A regular file is replaced in its own folder, so the links are followed by hand. Anything
  // else is opened by its own name: the kernel follows "magic" links such as /dev/stdout ->
  // /proc/self/fd/1 -> pipe:[...] that name no real path.
  if (S_ISREG(m)) t.path = follow_links(file, what);
  const std::string via = t.path == file ? "" : " (symlink to " + t.path.string() + ")";
  if (S_ISREG(m))
    t.kind = Kind::Regular;
  else if (S_ISCHR(m))
    t.kind = Kind::CharDevice;
  else if (S_ISFIFO(m))
    t.kind = Kind::Fifo;
  else if (S_ISDIR(m))
    refuse(file, what, "is a directory; expected a file name");
  else if (S_ISBLK(m))
    refuse(file, what, "is a block device; refusing to write to it");
  else if (S_ISSOCK(m))
    refuse(file, what, "is a socket; expected a file name");
  else
    refuse(file, what, "is not a regular file; expected a file name");
  if (auto input = input_named(t.st))
    refuse(file, what,
           "is the same file as the input " + *input + via +
               "; refusing to overwrite an input (choose another output name)");
  return t;
}

fs::path folder_of(const fs::path& path) {
  fs::path dir = path.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

void check_writable_folder(const fs::path& file, const std::string& what, const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    refuse(file, what, "folder " + dir.string() + " does not exist");
  if (!S_ISDIR(st.st_mode)) refuse(file, what, dir.string() + " is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    refuse(file, what, "folder " + dir.string() + " is not writable");
}

void check_target(const fs::path& file, const std::string& what, const Target& t) {
  if (t.kind == Kind::Missing || t.kind == Kind::Regular)
    check_writable_folder(file, what, folder_of(t.path));
  if (t.kind != Kind::Missing && ::access(t.path.c_str(), W_OK) != 0)
    refuse(file, what,
           t.kind == Kind::Regular ? "is read-only; refusing to replace it"
                                   : "cannot be written: " + errno_text(errno));
}

// 0, or the errno of the failed write.
int write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

// Character devices and FIFOs: written in place, never replaced.
void write_through(const fs::path& file, const Target& t, const std::string& text) {
  // O_NONBLOCK so that a FIFO nobody reads fails (ENXIO) instead of blocking forever.
  const int fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENXIO && t.kind == Kind::Fifo)
      throw IoError(file.string() + ": is a FIFO that nobody is reading; refusing to block");
    throw IoError(file.string() + ": cannot be opened for writing: " + errno_text(errno));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (const int err = write_all(fd, text)) {
    ::close(fd);
    throw IoError(file.string() + ": write failed: " + errno_text(err));
  }
  if (::close(fd) != 0) throw IoError(file.string() + ": write failed: " + errno_text(errno));
}

void write_replacing(const fs::path& file, const Target& t, const std::string& text) {
  const fs::path dir = folder_of(t.path);
  // A fresh hidden temporary beside the target (same file system, so the rename is atomic).
  // O_EXCL: a stale temporary or anything else of that name is never opened, let alone
  // truncated; a new name is tried instead.
  static std::atomic<unsigned> counter{0};
  fs::path temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    std::string suffix = ".tmp.";
    suffix += std::to_string(::getpid());
    suffix += ".";
    suffix += std::to_string(counter++);
    // The temporary keeps as much of the target's name as fits a file name (NAME_MAX, 255 bytes
    // on Linux file systems), so any legal output name gets a legal temporary.
    const std::string target = t.path.filename().string();
    const std::size_t room = kMaxFileNameBytes - 1 - suffix.size();
    std::string name = ".";  // appended piecewise: GCC 12 misreports `"." + string` (-Wrestrict)
    name += target.substr(0, room);
    name += suffix;
    temp = dir / name;
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST)
      throw IoError(file.string() + ": cannot create a temporary file in " + dir.string() + ": " +
                    errno_text(errno));
  }
  if (fd < 0)
    throw IoError(file.string() + ": cannot find a free temporary name in " + dir.string());
  auto fail = [&](const std::string& why) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw IoError(file.string() + ": " + why);
  };
  if (t.kind == Kind::Regular) (void)::fchmod(fd, t.st.st_mode & 07777);
  if (const int err = write_all(fd, text)) fail("write failed (disk full?): " + errno_text(err));
  if (::fsync(fd) != 0) fail("write failed (fsync): " + errno_text(errno));
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    throw IoError(file.string() + ": write failed: " + errno_text(errno));
  }
  if (::rename(temp.c_str(), t.path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw IoError(file.string() + ": cannot replace " + t.path.string() + ": " + errno_text(err));
  }
  // The rename itself is durable once the folder is synced.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// What makes two outputs the same file: device and inode when it exists, else the full path
// of where it would be created.
std::string identity(const Target& t) {
  if (t.kind != Kind::Missing)
    return "inode " + std::to_string(t.st.st_dev) + ":" + std::to_string(t.st.st_ino);
  std::error_code ec;
  fs::path full = fs::weakly_canonical(fs::absolute(t.path, ec), ec);
  return "path " + (ec ? t.path.lexically_normal() : full).string();
}

}  // namespace

void note_input_file(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return;
  std::lock_guard<std::mutex> lock(inputs_mutex());
  for (const auto& f : inputs())
    if (f.device == st.st_dev && f.inode == st.st_ino) return;
  inputs().push_back({st.st_dev, st.st_ino, file.string()});
}

void forget_input_files() {
  std::lock_guard<std::mutex> lock(inputs_mutex());
  inputs().clear();
}

void check_output_file(const fs::path& file, const std::string& what) {
  check_target(file, what, resolve(file, what));
}

void check_output_folder(const fs::path& dir, const std::string& what) {
  if (dir.empty()) refuse(dir, what, "empty folder name");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) refuse(dir, what, "exists and is not a folder");
    if (::access(dir.c_str(), W_OK | X_OK) != 0) refuse(dir, what, "folder is not writable");
    return;
  }
  if (errno != ENOENT) refuse(dir, what, "cannot be examined: " + errno_text(errno));
  // It will be created: the nearest existing parent must be a writable folder.
  std::error_code ec;
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && ::stat(parent.c_str(), &st) != 0) {
    if (parent == parent.parent_path()) break;
    parent = parent.parent_path();
  }
  if (!S_ISDIR(st.st_mode))
    refuse(dir, what, "cannot be created: " + parent.string() + " is not a folder");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    refuse(dir, what, "cannot be created: folder " + parent.string() + " is not writable");
}

void check_outputs(const std::vector<OutputTarget>& outputs) {
  std::vector<std::pair<std::string, const OutputTarget*>> seen;
  for (const auto& o : outputs) {
    if (o.file.empty()) continue;
    const Target t = resolve(o.file, o.what);
    check_target(o.file, o.what, t);
    const std::string id = identity(t);
    for (const auto& [other_id, other] : seen)
      if (other_id == id)
        refuse(o.file, o.what,
               "is the same file as " + label(other->file, other->what) +
                   "; each output needs a file of its own");
    seen.emplace_back(id, &o);
  }
}

void write_file_atomically(const fs::path& file, const std::string& text) {
  const Target t = resolve(file, "");
  check_target(file, "", t);
  if (t.kind == Kind::CharDevice || t.kind == Kind::Fifo)
    write_through(file, t, text);
  else
    write_replacing(file, t, text);
}

void replace_file_atomically(const fs::path& file, const std::string& text) {
  if (file.empty()) refuse(file, "", "empty file name");
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    if (errno != ENOENT) refuse(file, "", "cannot be examined: " + errno_text(errno));
  } else if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    refuse(file, "", "is not a regular file; refusing to replace it");
  }
  // A new file of its own: the permissions of what was there (a link's, or another owner's
  // file) are not carried over.
  Target t;
  t.path = file;
  t.kind = Kind::Missing;
  check_writable_folder(file, "", folder_of(file));
  write_replacing(file, t, text);
}

}  // namespace cephalo

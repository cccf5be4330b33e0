#pragma once
// The start-up cache's file reader (fit_cache.cpp; private to costmodels): whole files into one
// buffer reused from file to file, and the checks on the entry's own name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cephalo::costmodels::fit_cache_io {

// Reads whole files into one buffer reused from file to file: the start-up path hashes ~300 KB
// of inputs and reads a ~160 KB entry, and copying them through stdio and growing strings was a
// quarter of a warm start's work.
class FileBuffer {
 public:
  // The whole of `file` (sized by fstat, read until end of file), else nullopt (cannot be opened
  // or read, e.g. a folder). The view lives until the next read. With `own`, `file` is one this
  // code writes (the cache entry): a link, anything but a regular file, or a file over
  // `own->max_bytes` is not read, and `own->why` says which.
  struct OwnFile {
    std::size_t max_bytes = 0;
    std::string why;
  };
  std::optional<std::string_view> read(const std::filesystem::path& file, OwnFile* own = nullptr) {
    // O_NONBLOCK: a FIFO at an own file's name must not block the start-up (no effect on a
    // regular file's reads).
    const int fd = ::open(
        file.c_str(), own ? O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK : O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (own && errno == ELOOP) own->why = "is a symbolic link (never followed)";
      return std::nullopt;
    }
    struct stat st {};
    std::size_t size = 0;
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (own && (!regular || static_cast<std::uintmax_t>(st.st_size) > own->max_bytes)) {
      own->why = !regular ? "is not a regular file"
                          : "holds " + std::to_string(st.st_size) +
                                " bytes, more than an entry's " + std::to_string(own->max_bytes);
      ::close(fd);
      return std::nullopt;
    }
    if (regular && st.st_size > 0)
      reserve(static_cast<std::size_t>(st.st_size) + 1);  // + 1: end of file in one read
    bool ok = true;
    for (;;) {
      if (size == capacity_) reserve(std::max<std::size_t>(2 * capacity_, 1 << 16));
      const ::ssize_t n = ::read(fd, data_.get() + size, capacity_ - size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = n == 0;
        break;
      }
      size += static_cast<std::size_t>(n);
    }
    ::close(fd);
    if (!ok) return std::nullopt;
    return std::string_view(data_.get(), size);
  }

 private:
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    auto bigger = std::make_unique_for_overwrite<char[]>(n);
    if (capacity_) std::memcpy(bigger.get(), data_.get(), capacity_);
    data_ = std::move(bigger);
    capacity_ = n;
  }
  std::unique_ptr<char[]> data_;
  std::size_t capacity_ = 0;
};

}  // namespace cephalo::costmodels::fit_cache_io

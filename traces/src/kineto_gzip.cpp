// gunzip for Kineto traces (kineto_trace.hpp): zlib, bounded while inflating.
#include <zlib.h>

#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"
#include "cephalo/traces/kineto_trace.hpp"

namespace cephalo::traces {

std::string gunzip(const std::string& bytes, const std::string& file, std::uint64_t max_bytes) {
  z_stream z{};
  // 16 + MAX_WBITS: a gzip wrapper (header and CRC checked by zlib), not raw deflate.
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw RuntimeFailure("zlib could not start inflating " + file);
  struct Guard {
    z_stream* z;
    ~Guard() { inflateEnd(z); }
  } guard{&z};
  std::string out;
  std::size_t consumed = 0;
  char buffer[1 << 16];
  const auto fail = [&](const std::string& what) -> void {
    throw ValidationError(file, "$", what,
                          "a gzip-compressed trace (torch.profiler's .json.gz) that inflates "
                          "completely");
  };
  while (consumed < bytes.size()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - consumed, 1u << 30);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + consumed));
    z.avail_in = static_cast<uInt>(chunk);
    int rc = Z_OK;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer);
      z.avail_out = sizeof buffer;
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR)
        fail(std::string("corrupt gzip data (zlib: ") + (z.msg ? z.msg : "data error") + ")");
      const std::size_t produced = sizeof buffer - z.avail_out;
      if (out.size() + produced > max_bytes)
        throw ValidationError(file, "$",
                              "gzip data that inflates to more than " +
                                  format_quantity(static_cast<double>(max_bytes), Quantity::Bytes),
                              "a trace of at most " +
                                  format_quantity(static_cast<double>(max_bytes), Quantity::Bytes) +
                                  " once inflated (the trace size bound)");
      out.append(buffer, produced);
      if (rc == Z_BUF_ERROR && z.avail_in == 0) break;  // needs more input
    } while (rc != Z_STREAM_END && (z.avail_in > 0 || z.avail_out == 0));
    consumed += chunk - z.avail_in;
    if (rc == Z_STREAM_END) {
      // Another member may follow (gzip allows concatenation); anything else is trailing junk.
      if (consumed < bytes.size()) {
        if (bytes.size() - consumed < 2 || static_cast<unsigned char>(bytes[consumed]) != 0x1f ||
            static_cast<unsigned char>(bytes[consumed + 1]) != 0x8b)
          fail("bytes after the end of the gzip stream");
        inflateReset(&z);
      }
      continue;
    }
    if (consumed >= bytes.size()) fail("a gzip stream that ends early (truncated)");
  }
  if (bytes.empty()) fail("an empty file");
  return out;
}

}  // namespace cephalo::traces

#include "checkpoint/zip_records.h"

#include <ATen/Parallel.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDir = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr size_t kEocdSize = 22;
constexpr size_t kMaxComment = 0xFFFF;

// Little-endian reads with bounds: every offset comes from the file, so none is trusted.
class Cursor {
 public:
  Cursor(const char* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}
  void need(uint64_t pos, uint64_t n, const char* what) const {
    DS_CHECK_T(CheckpointError, pos <= size_ && n <= size_ - pos, "checkpoint file ", name_,
               " is truncated or corrupt: its zip ", what, " lies outside the file (", size_,
               " bytes)");
  }
  uint64_t le(uint64_t pos, int bytes, const char* what) const {
    need(pos, static_cast<uint64_t>(bytes), what);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i)
      v = v << 8 | static_cast<unsigned char>(data_[pos + static_cast<uint64_t>(i)]);
    return v;
  }

 private:
  const char* data_;
  size_t size_;
  const std::string& name_;
};

// The central directory's offset and entry count, from the (zip64) end-of-central-directory record.
void find_central_dir(const char* data, size_t size, const Cursor& c, const std::string& name,
                      uint64_t* cd_offset, uint64_t* entries) {
  DS_CHECK_T(CheckpointError, size >= kEocdSize, "checkpoint file ", name,
             " is truncated: shorter than a zip end record");
  // The end record sits in the last 22 + comment bytes; search backwards for its signature.
  const size_t lowest = size > kEocdSize + kMaxComment ? size - kEocdSize - kMaxComment : 0;
  size_t eocd = std::numeric_limits<size_t>::max();
  for (size_t pos = size - kEocdSize + 1; pos-- > lowest;) {
    if (c.le(pos, 4, "end record") == kEndOfCentralDir) {
      eocd = pos;
      break;
    }
  }
  DS_CHECK_T(CheckpointError, eocd != std::numeric_limits<size_t>::max(), "checkpoint file ", name,
             " is truncated or corrupt: no zip end-of-central-directory record");
  *entries = c.le(eocd + 10, 2, "end record");
  *cd_offset = c.le(eocd + 16, 4, "end record");
  if (*entries == 0xFFFF || *cd_offset == 0xFFFFFFFF) {
    DS_CHECK_T(CheckpointError, eocd >= 20 && c.le(eocd - 20, 4, "zip64 locator") == kZip64Locator,
               "checkpoint file ", name, " is corrupt: a zip64 archive without its zip64 locator");
    const uint64_t eocd64 = c.le(eocd - 20 + 8, 8, "zip64 locator");
    DS_CHECK_T(CheckpointError, c.le(eocd64, 4, "zip64 end record") == kZip64EndOfCentralDir,
               "checkpoint file ", name,
               " is corrupt: no zip64 end record where its locator points");
    *entries = c.le(eocd64 + 32, 8, "zip64 end record");
    *cd_offset = c.le(eocd64 + 48, 8, "zip64 end record");
  }
}

}  // namespace

std::vector<ZipRecord> read_zip_records(const char* data, size_t size, const std::string& name) {
  Cursor c(data, size, name);
  uint64_t pos = 0, entries = 0;
  find_central_dir(data, size, c, name, &pos, &entries);
  std::vector<ZipRecord> out;
  for (uint64_t i = 0; i < entries; ++i) {
    DS_CHECK_T(CheckpointError, c.le(pos, 4, "central directory") == kCentralHeader,
               "checkpoint file ", name, " is corrupt: zip central directory entry ", i,
               " has no signature");
    ZipRecord r;
    r.stored = c.le(pos + 10, 2, "central directory") == 0;
    r.crc32 = static_cast<uint32_t>(c.le(pos + 16, 4, "central directory"));
    uint64_t comp_size = c.le(pos + 20, 4, "central directory");
    uint64_t uncomp_size = c.le(pos + 24, 4, "central directory");
    const uint64_t name_len = c.le(pos + 28, 2, "central directory");
    const uint64_t extra_len = c.le(pos + 30, 2, "central directory");
    const uint64_t comment_len = c.le(pos + 32, 2, "central directory");
    uint64_t local = c.le(pos + 42, 4, "central directory");
    c.need(pos + 46, name_len, "record name");
    r.name.assign(data + pos + 46, name_len);
    // zip64 extra field: 64-bit values for exactly the fields that hold 0xFFFFFFFF, in this order.
    for (uint64_t e = pos + 46 + name_len; e + 4 <= pos + 46 + name_len + extra_len;) {
      const uint64_t id = c.le(e, 2, "extra field"), len = c.le(e + 2, 2, "extra field");
      if (id == 0x0001) {
        uint64_t f = e + 4;
        if (uncomp_size == 0xFFFFFFFF) uncomp_size = c.le(f, 8, "zip64 field"), f += 8;
        if (comp_size == 0xFFFFFFFF) comp_size = c.le(f, 8, "zip64 field"), f += 8;
        if (local == 0xFFFFFFFF) local = c.le(f, 8, "zip64 field");
      }
      e += 4 + len;
    }
    r.size = comp_size;
    DS_CHECK_T(CheckpointError, c.le(local, 4, "local header") == kLocalHeader, "checkpoint file ",
               name, " is corrupt: record ", r.name, " has no local header");
    r.offset =
        local + 30 + c.le(local + 26, 2, "local header") + c.le(local + 28, 2, "local header");
    c.need(r.offset, r.size, "record data");
    out.push_back(std::move(r));
    pos += 46 + name_len + extra_len + comment_len;
  }
  std::sort(out.begin(), out.end(),
            [](const ZipRecord& a, const ZipRecord& b) { return a.offset < b.offset; });
  return out;
}

uint32_t crc32_of(const char* data, size_t size) {
  // zlib runs at ~2.7 GB/s on one core here; chunks of 16 MiB over threads, joined with
  // crc32_combine (cheap: logarithmic in the chunk length), scale that with the cores.
  constexpr size_t kChunk = size_t{16} << 20;
  const auto* p = reinterpret_cast<const Bytef*>(data);
  if (size <= kChunk) return static_cast<uint32_t>(::crc32(0, p, static_cast<uInt>(size)));
  const int64_t chunks = static_cast<int64_t>((size + kChunk - 1) / kChunk);
  std::vector<uLong> crcs(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t off = static_cast<size_t>(i) * kChunk;
      crcs[static_cast<size_t>(i)] =
          ::crc32(0, p + off, static_cast<uInt>(std::min(kChunk, size - off)));
    }
  });
  uLong crc = crcs[0];
  for (int64_t i = 1; i < chunks; ++i) {
    const size_t off = static_cast<size_t>(i) * kChunk;
    crc = ::crc32_combine(crc, crcs[static_cast<size_t>(i)],
                          static_cast<z_off_t>(std::min(kChunk, size - off)));
  }
  return static_cast<uint32_t>(crc);
}

void verify_zip_record(const char* data, const ZipRecord& record, const std::string& file,
                       const std::string& what) {
  if (!record.stored) return;  // torch never compresses; a compressed record is not mapped either
  const uint32_t crc = crc32_of(data + record.offset, record.size);
  if (crc == record.crc32) return;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "CRC-32 %08x, stored %08x", crc, record.crc32);
  throw CheckpointCorruptError("checkpoint file " + file + " is corrupt: record " + record.name +
                               (what.empty() ? "" : " ('" + what + "')") + " of " +
                               std::to_string(record.size) + " bytes fails its checksum (" + buf +
                               "); the file was damaged after it was written");
}

}  // namespace deepspeed::checkpoint

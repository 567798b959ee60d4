// The record table of a zip archive (torch.save's container), read from its central directory, and
// the CRC-32 check of a record's bytes.
//
// PyTorchStreamReader does not check CRC-32s of the records we map (we point tensors straight into
// the file's bytes and never extract them), so a flipped byte in tensor data would load silently.
// This reader gives each record's name, data offset, size and stored CRC-32, so the loader can
// check them (state_io.cc). zip64 archives (torch writes them past 4 GiB) are read too.
//
// Thread-safety: stateless functions over caller-owned bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace deepspeed::checkpoint {

struct ZipRecord {
  std::string name;     // as stored, e.g. "archive/data/0"
  uint64_t offset = 0;  // first byte of the record's data in the archive
  uint64_t size = 0;    // bytes of data as stored
  uint32_t crc32 = 0;   // CRC-32 of the uncompressed data, from the central directory
  bool stored = true;   // method 0 (no compression): the CRC covers [offset, offset + size)
};

// The archive's records, sorted by offset. Throws CheckpointError naming `name` when the central
// directory is missing, truncated, or points outside the archive.
std::vector<ZipRecord> read_zip_records(const char* data, size_t size, const std::string& name);

// CRC-32 (zlib's polynomial) of `size` bytes; large inputs are split across threads.
uint32_t crc32_of(const char* data, size_t size);

// Throws CheckpointCorruptError naming `file`, the record and `what` (the entry it holds; may be
// empty) when a stored record's bytes do not match its CRC-32. `data` is the whole archive.
void verify_zip_record(const char* data, const ZipRecord& record, const std::string& file,
                       const std::string& what = "");

}  // namespace deepspeed::checkpoint

// A checkpoint byte changed after the save is caught by the zip records' CRC-32s: load_state names
// the file, the record and the entry it holds, whether the file is read, mapped or parsed from
// bytes; a mapped load that defers the check catches it in verify_tensor, for the damaged record
// only. The damage is placed by finding the tensor's bytes in the file, not through the reader
// under test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/zip_records.h"
#include "deepspeed/checkpoint.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ds_test::TempDir;

namespace {

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Where `t`'s bytes start in `bytes` (each test tensor's values are unique in its file).
size_t find_tensor(const std::vector<char>& bytes, const at::Tensor& t) {
  const char* p = static_cast<const char*>(t.data_ptr());
  const size_t n = static_cast<size_t>(t.nbytes());
  for (size_t i = 0; i + n <= bytes.size(); ++i)
    if (std::memcmp(bytes.data() + i, p, n) == 0) return i;
  ADD_FAILURE() << "tensor bytes not found in the file";
  return 0;
}

// weights: 1000 floats 0..999; bias: 10 floats from 5000; step: an int.
ckpt::StateDict sample() {
  ckpt::StateDict module = ckpt::make_state_dict();
  module.insert("weights", at::arange(1000, at::kFloat));
  module.insert("bias", at::arange(5000, 5010, at::kFloat));
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("module", module);
  s.insert("step", int64_t{7});
  return s;
}

// Saves sample() to <dir>/f.pt and flips one byte in the middle of `key`'s data; returns the path.
std::string save_flipped(const TempDir& dir, const std::string& key) {
  const std::string path = dir.file("f.pt");
  ckpt::StateDict s = sample();
  ckpt::save_state(path, s);
  std::vector<char> bytes = read_all(path);
  const at::Tensor t = s.at("module").toGenericDict().at(key).toTensor();
  bytes[find_tensor(bytes, t) + static_cast<size_t>(t.nbytes()) / 2] ^= 0x40;
  write_all(path, bytes);
  return path;
}

void expect_corrupt(const std::function<void()>& load, const std::string& file,
                    const std::string& entry) {
  try {
    load();
    ADD_FAILURE() << "a damaged file loaded";
  } catch (const ckpt::CheckpointCorruptError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint file " + file + " is corrupt: record archive/data/"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("('" + entry + "')"), std::string::npos) << what;
    EXPECT_NE(what.find("fails its checksum"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(RecordChecksum, IntactFileLoadsEveryWay) {
  TempDir dir;
  const std::string path = dir.file("f.pt");
  ckpt::save_state(path, sample());
  for (bool mmap : {false, true}) {
    ckpt::StateDict s = ckpt::load_state(path, ckpt::LoadOptions{mmap});
    EXPECT_TRUE(at::equal(s.at("module").toGenericDict().at("weights").toTensor(),
                          at::arange(1000, at::kFloat)));
  }
  EXPECT_NO_THROW(ckpt::deserialize_state(read_all(path), path));
}

TEST(RecordChecksum, FlippedTensorByteIsCaughtNamingFileRecordAndEntry) {
  TempDir dir;
  const std::string path = save_flipped(dir, "weights");
  expect_corrupt([&] { ckpt::load_state(path); }, path, "module/weights");
  expect_corrupt([&] { ckpt::load_state(path, ckpt::LoadOptions{/*mmap=*/true}); }, path,
                 "module/weights");
  expect_corrupt([&] { ckpt::deserialize_state(read_all(path), path); }, path, "module/weights");
}

TEST(RecordChecksum, DeferredCheckCatchesOnlyTheDamagedRecord) {
  TempDir dir;
  const std::string path = save_flipped(dir, "bias");
  ckpt::StateDict s =
      ckpt::load_state(path, ckpt::LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
  c10::impl::GenericDict module = s.at("module").toGenericDict();
  EXPECT_NO_THROW(ckpt::verify_tensor(module.at("weights").toTensor(), "module/weights"));
  // A view of the damaged tensor leads to its record too.
  expect_corrupt(
      [&] { ckpt::verify_tensor(module.at("bias").toTensor().narrow(0, 2, 3), "module/bias"); },
      path, "module/bias");
  // Tensors that did not come from a file are not checked.
  EXPECT_NO_THROW(ckpt::verify_tensor(at::ones({4})));
}

TEST(RecordChecksum, DamagedPickleIsNamedBeforeUnpickling) {
  TempDir dir;
  const std::string path = dir.file("f.pt");
  ckpt::save_state(path, sample());
  std::vector<char> bytes = read_all(path);
  const std::string key = "weights";  // the pickle holds the key names
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  *it = 'W';
  write_all(path, bytes);
  try {
    ckpt::load_state(path);
    ADD_FAILURE() << "a damaged pickle loaded";
  } catch (const ckpt::CheckpointCorruptError& e) {
    EXPECT_NE(std::string(e.what()).find("record archive/data.pkl ('data.pkl')"), std::string::npos)
        << e.what();
  }
}

TEST(RecordChecksum, RecordTableMatchesTheWriter) {
  // The table: names, and offsets that point at the bytes the writer wrote, with zlib's CRC of
  // them.
  ckpt::StateDict s = sample();
  const std::vector<char> bytes = ckpt::serialize_state(s);
  const auto records = ckpt::read_zip_records(bytes.data(), bytes.size(), "mem");
  std::vector<std::string> names;
  for (const auto& r : records) names.push_back(r.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "archive/data.pkl"), names.end());
  const at::Tensor w = s.at("module").toGenericDict().at("weights").toTensor();
  const size_t at_w = find_tensor(bytes, w);
  bool found = false;
  for (const auto& r : records) {
    EXPECT_TRUE(r.stored) << r.name;
    EXPECT_EQ(r.crc32, ckpt::crc32_of(bytes.data() + r.offset, r.size)) << r.name;
    if (r.offset == at_w) {
      found = true;
      EXPECT_EQ(r.size, static_cast<uint64_t>(w.nbytes()));
    }
  }
  EXPECT_TRUE(found) << "no record starts at the weights' bytes";
}

TEST(RecordChecksum, ParallelCrcEqualsOnePass) {
  // crc32_of splits large inputs into chunks combined with crc32_combine: 40 MiB + 3 bytes (three
  // chunks, a ragged tail) against zlib in one pass over the same bytes, computed bytewise with the
  // reflected polynomial here.
  std::vector<char> data((size_t{40} << 20) + 3);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data) {
    crc ^= static_cast<unsigned char>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  EXPECT_EQ(ckpt::crc32_of(data.data(), data.size()), crc ^ 0xFFFFFFFFu);
}

TEST(RecordChecksum, Zip64ArchiveWithManyRecordsIsRead) {
  // More than 65535 records: the writer then needs zip64's end record, which the table must follow.
  c10::List<at::Tensor> many;
  for (int i = 0; i < 66000; ++i) many.push_back(at::full({1}, static_cast<float>(i)));
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("many", many);
  const std::vector<char> bytes = ckpt::serialize_state(s);
  EXPECT_GE(ckpt::read_zip_records(bytes.data(), bytes.size(), "mem").size(), 66001u);
  ckpt::StateDict back = ckpt::deserialize_state(bytes, "mem");
  EXPECT_EQ(back.at("many").toList().get(65999).toTensor().item<float>(), 65999.0f);
}

// Not a check (no timing assertions): prints what the checksums add to a ~100 MB load.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*LoadCost*'.
TEST(RecordChecksum, DISABLED_LoadCost) {
  TempDir dir;
  const std::string path = dir.file("big.pt");
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("a", at::randn({12500000}));
  s.insert("b", at::randn({12500000}));
  ckpt::save_state(path, s);
  auto time = [&](bool mmap, bool verify) {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      ckpt::StateDict l = ckpt::load_state(path, ckpt::LoadOptions{mmap, nullptr, verify});
      // Touch every byte, as a real load does when it copies the tensors out.
      double sum =
          l.at("a").toTensor().sum().item<double>() + l.at("b").toTensor().sum().item<double>();
      (void)sum;
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  for (bool mmap : {false, true})
    std::printf("100 MB %s load + sum: %.1f ms without checksums, %.1f ms with\n",
                mmap ? "mapped" : "read", 1e3 * time(mmap, false), 1e3 * time(mmap, true));
}

}  // namespace

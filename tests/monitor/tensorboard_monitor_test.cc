// The TensorBoard event writer against known bytes: CRC-32C test vectors (RFC 3720), an Event's
// protobuf bytes worked out by hand from the wire format, and a file read back by an independent
// decoder written here (TFRecord frames, masked CRCs, varints and fixed-width fields), checking
// every scalar, step and tag.
#include "monitor/tensorboard_monitor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace deepspeed::monitor {
namespace {

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(TensorBoard, ScalarEventBytesFromTheWireFormat) {
  // Event{wall_time 1.5, step 3, summary{value{tag "a", simple_value 2.0}}}
  const std::string want = std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f", 9) +
                           std::string("\x10\x03", 2) + std::string("\x2a\x0a", 2) +
                           std::string("\x0a\x08", 2) + std::string("\x0a\x01\x61", 3) +
                           std::string("\x15\x00\x00\x00\x40", 5);
  EXPECT_EQ(encode_scalar_event(1.5, 3, {{"a", 2.0f}}), want);
  // file_version "brain.Event:2" is field 3, length 13.
  const std::string v = encode_file_version_event(0.0);
  EXPECT_EQ(v.substr(9), std::string("\x1a\x0d", 2) + "brain.Event:2");
  // A step past 127 takes a two-byte varint: 300 = 0xAC 0x02.
  EXPECT_NE(encode_scalar_event(0, 300, {}).find(std::string("\x10\xac\x02", 3)),
            std::string::npos);
}

// ---- An independent reader ----
struct Decoded {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

uint64_t varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(b.at(i++));
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return v;
  }
}

template <typename T>
T fixed(const std::string& b, size_t& i) {
  T v;
  std::memcpy(&v, b.data() + i, sizeof(T));
  i += sizeof(T);
  return v;
}

// Calls fn(field, wire_type, i) for each field of `b`; fn consumes the value.
template <typename Fn>
void fields(const std::string& b, const Fn& fn) {
  for (size_t i = 0; i < b.size();) {
    const uint64_t key = varint(b, i);
    fn(static_cast<int>(key >> 3), static_cast<int>(key & 7), i);
  }
}

std::string bytes_field(const std::string& b, size_t& i) {
  const uint64_t n = varint(b, i);
  std::string s = b.substr(i, n);
  i += n;
  return s;
}

Decoded decode_event(const std::string& b) {
  Decoded d;
  fields(b, [&](int field, int wire, size_t& i) {
    if (field == 1 && wire == 1)
      d.wall_time = fixed<double>(b, i);
    else if (field == 2 && wire == 0)
      d.step = static_cast<int64_t>(varint(b, i));
    else if (field == 3 && wire == 2)
      d.file_version = bytes_field(b, i);
    else if (field == 5 && wire == 2) {
      const std::string summary = bytes_field(b, i);
      fields(summary, [&](int, int, size_t& j) {
        const std::string value = bytes_field(summary, j);
        std::string tag;
        float x = 0;
        fields(value, [&](int f, int w, size_t& k) {
          if (f == 1 && w == 2)
            tag = bytes_field(value, k);
          else if (f == 2 && w == 5)
            x = fixed<float>(value, k);
          else
            FAIL() << "unexpected Value field " << f;
        });
        d.scalars[tag] = x;
      });
    } else {
      ADD_FAILURE() << "unexpected Event field " << field << " wire " << wire;
      i = b.size();
    }
  });
  return d;
}

std::vector<Decoded> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Decoded> out;
  for (size_t i = 0; i < b.size();) {
    EXPECT_LE(i + 12, b.size()) << "truncated header";
    const size_t start = i;
    const uint64_t n = fixed<uint64_t>(b, i);
    const uint32_t length_crc = fixed<uint32_t>(b, i);
    EXPECT_EQ(length_crc, masked_crc32c(b.data() + start, 8))
        << "length crc at record " << out.size();
    const std::string data = b.substr(i, n);
    i += n;
    const uint32_t data_crc = fixed<uint32_t>(b, i);
    EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size())) << "data crc";
    out.push_back(decode_event(data));
  }
  return out;
}

TEST(TensorBoard, EventFileReadsBackEveryScalar) {
  ds_test::TempDir dir("tensorboard");
  std::string path;
  {
    TensorBoardMonitor m(dir.path(), "job");
    path = m.path();
    EXPECT_EQ(std::filesystem::path(path).parent_path().string(), dir.path() + "/job");
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    m.write_events({{"Train/Samples/train_loss", 2.25, 8}, {"Train/Samples/lr", 1e-3, 8}});
    // Flushed: readable while the writer is open.
    EXPECT_EQ(read_event_file(path).size(), 2u);
    m.write_events({{"Train/Samples/train_loss", 1.5, 16}, {"Train/Samples/lr", 2e-3, 16}});
  }
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].step, 8);
  EXPECT_EQ(events[1].scalars.at("Train/Samples/train_loss"), 2.25f);
  EXPECT_EQ(events[1].scalars.at("Train/Samples/lr"), 1e-3f);
  EXPECT_EQ(events[2].step, 16);
  EXPECT_EQ(events[2].scalars.at("Train/Samples/train_loss"), 1.5f);
  EXPECT_EQ(events[2].scalars.at("Train/Samples/lr"), 2e-3f);
}

}  // namespace
}  // namespace deepspeed::monitor

#include "monitor/tensorboard_monitor.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "deepspeed/error.h"

namespace deepspeed::monitor {
namespace {

// The wire format and TFRecord are little-endian; put_fixed copies the host's bytes.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the TensorBoard encoder assumes a little-endian host");

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli polynomial
    t[i] = c;
  }
  return t;
}

// Protobuf wire format, just what Event and Summary need.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out,
               T v) {  // little-endian, as the wire format and every host we build for
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& values) {
  // Event { double wall_time = 1; int64 step = 2; Summary summary = 5; }
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);
    put_fixed<float>(v, value);
    put_bytes(summary, 1, v);
  }
  std::string event;
  put_key(event, 1, 1);
  put_fixed<double>(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  return event;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;  // Event { double wall_time = 1; string file_version = 3; }
  put_key(event, 1, 1);
  put_fixed<double>(event, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  const uint64_t length = data.size();
  put_fixed<uint64_t>(out, length);
  put_fixed<uint32_t>(out, masked_crc32c(&length, sizeof(length)));
  out += data;
  put_fixed<uint32_t>(out, masked_crc32c(data.data(), data.size()));
  return out;
}

TensorBoardMonitor::TensorBoardMonitor(const std::string& output_path,
                                       const std::string& job_name) {
  const std::filesystem::path dir = std::filesystem::path(output_path) / job_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DS_CHECK(!ec, "tensorboard: cannot create the output directory ", dir.string(), ": ",
           ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double now = now_seconds();
  static std::atomic<int> count{0};
  path_ = (dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host +
                  "." + std::to_string(::getpid()) + "." + std::to_string(count++)))
              .string();
  file_ = std::fopen(path_.c_str(), "wbx");  // a new file: never two writers in one
  DS_CHECK(file_ != nullptr, "tensorboard: cannot open ", path_, ": ", std::strerror(errno));
  append(tfrecord(encode_file_version_event(now)));
}

TensorBoardMonitor::~TensorBoardMonitor() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardMonitor::append(const std::string& record) {
  DS_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
               std::fflush(file_) == 0,
           "tensorboard: cannot write ", path_, ": ", std::strerror(errno));
}

void TensorBoardMonitor::write_events(const std::vector<Event>& events) {
  // One Event per step, as SummaryWriter.add_scalar writes them (TensorBoard reads either way).
  std::map<int64_t, std::vector<std::pair<std::string, float>>> by_step;
  for (const Event& e : events) by_step[e.step].emplace_back(e.name, static_cast<float>(e.value));
  const double now = now_seconds();
  std::string records;
  for (const auto& [step, values] : by_step)
    records += tfrecord(encode_scalar_event(now, step, values));
  append(records);
}

}  // namespace deepspeed::monitor

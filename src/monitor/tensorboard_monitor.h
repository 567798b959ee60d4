// DeepSpeed's tensorboard monitor without TensorBoard's libraries: an event file that TensorBoard
// reads, written by our own small encoder.
// <output_path>/<job_name>/events.out.tfevents.<seconds>.<host>.<pid>.<n> (as in DeepSpeed, the
// default output_path "" means ./<job_name>; pid and a per-process count keep writers apart, as
// torch's SummaryWriter does) holds TFRecords: a little-endian uint64 length, its masked CRC-32C,
// the bytes, their masked CRC-32C. The first record is an Event with file_version "brain.Event:2";
// then one Event per call and step (wall_time, step, summary with one scalar value per metric, tag
// = the metric's name), as torch's SummaryWriter writes add_scalar. Flushed after every call.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "monitor/monitor.h"

namespace deepspeed::monitor {

// CRC-32C (Castagnoli), and TFRecord's masking of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The protobuf bytes of a tensorflow.Event holding one scalar summary per (tag, value).
std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& values);
// The protobuf bytes of the first Event of a file (file_version).
std::string encode_file_version_event(double wall_time);
// One TFRecord around `data`.
std::string tfrecord(const std::string& data);

class TensorBoardMonitor : public Writer {
 public:
  // Creates the directory and the event file; throws deepspeed::Error naming the path when it
  // cannot.
  TensorBoardMonitor(const std::string& output_path, const std::string& job_name);
  ~TensorBoardMonitor() override;
  TensorBoardMonitor(const TensorBoardMonitor&) = delete;
  TensorBoardMonitor& operator=(const TensorBoardMonitor&) = delete;

  void write_events(const std::vector<Event>& events) override;
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& record);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace deepspeed::monitor

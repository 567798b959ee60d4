// Training metrics out of the engine, after DeepSpeed's monitor package: the engine hands a list of
// events (name, value, step) to a MonitorMaster, which passes them to every writer the config
// enables. Names follow DeepSpeed's ("Train/Samples/train_loss", ...), steps are global samples as
// in DeepSpeed.
//
// Only rank 0 writes (the engine constructs the master with its rank). Each writer flushes after
// every call, so a crash loses at most the events of the step in flight; a writer that fails (disk
// full) is reported and turned off rather than stopping rank 0 alone. Every metric of a step is
// logged at the global samples after it (DeepSpeed logs train_loss at the samples before the step
// and lr after it). Not thread-safe: one engine thread writes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::monitor {

struct Event {
  std::string name;  // e.g. "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;
};

class Writer {
 public:
  virtual ~Writer() = default;
  virtual void write_events(const std::vector<Event>& events) = 0;
};

class MonitorMaster {
 public:
  // Writers for the enabled sections of `config` (tensorboard, csv_monitor); none on ranks other
  // than 0. (Monitors this build has no writer for are refused by name at initialize:
  // config/feature_gate.cc.)
  MonitorMaster(const config::Config& config, int rank);
  bool enabled() const { return !writers_.empty(); }
  // Never throws (see above).
  void write_events(const std::vector<Event>& events);

 private:
  std::vector<std::unique_ptr<Writer>> writers_;
};

}  // namespace deepspeed::monitor

#include "runtime/state_sections.h"

#include "checkpoint/load_plan.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

using checkpoint::CheckpointError;
using checkpoint::saved_entry;

c10::impl::GenericDict loss_scaler_section(const LossScaler& scaler) {
  const LossScaler::State st = scaler.state();
  c10::impl::GenericDict s = checkpoint::make_any_dict();
  s.insert(std::string("cur_scale"), st.cur_scale);
  s.insert(std::string("cur_iter"), st.cur_iter);
  s.insert(std::string("last_overflow_iter"), st.last_overflow_iter);
  s.insert(std::string("cur_hysteresis"), static_cast<int64_t>(st.cur_hysteresis));
  s.insert(std::string("skipped_steps"), st.skipped_steps);
  return s;
}

LossScaler::State read_loss_scaler_section(const c10::impl::GenericDict& saved, const LossScaler& scaler,
                                           const std::string& where) {
  LossScaler::State st;
  st.cur_scale = saved_entry(saved, "cur_scale", where).toDouble();
  st.cur_iter = saved_entry(saved, "cur_iter", where).toInt();
  st.last_overflow_iter = saved_entry(saved, "last_overflow_iter", where).toInt();
  st.cur_hysteresis = static_cast<int>(saved_entry(saved, "cur_hysteresis", where).toInt());
  st.skipped_steps = saved_entry(saved, "skipped_steps", where).toInt();
  try {
    scaler.check_state(st);
  } catch (const Error& e) {
    throw CheckpointError(where + ": " + e.what());
  }
  return st;
}

c10::impl::GenericDict scheduler_section(const LrScheduler& scheduler) {
  c10::impl::GenericDict s = checkpoint::make_any_dict();
  s.insert(std::string("type"), std::string(scheduler.type()));
  s.insert(std::string("last_batch_iteration"), scheduler.state_dict().last_batch_iteration);
  return s;
}

LrSchedulerState read_scheduler_section(const c10::impl::GenericDict& saved, const LrScheduler& scheduler,
                                        const std::string& where) {
  const std::string type = saved.contains(std::string("type")) ? saved_entry(saved, "type", where).toStringRef()
                                                               : std::string(scheduler.type());
  DS_CHECK_T(CheckpointError, type == scheduler.type(), where, " is a ", type, ", this engine runs a ",
             scheduler.type(), "; load it with load_lr_scheduler_states=false");
  return LrSchedulerState{saved_entry(saved, "last_batch_iteration", where).toInt()};
}

}  // namespace deepspeed::runtime

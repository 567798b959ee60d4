// The model file's sections that runtime components own, as checkpoints write and read them: the loss scaler's
// state ("loss_scaler") and the schedule's position ("lr_scheduler"). Reading checks everything and applies
// nothing, so a load can refuse a bad section before it changes any state.
#pragma once

#include <ATen/core/Dict.h>

#include <string>

#include "deepspeed/lr_schedules.h"
#include "runtime/loss_scaler.h"

namespace deepspeed::runtime {

constexpr const char* kLossScalerSection = "loss_scaler";
constexpr const char* kSchedulerSection = "lr_scheduler";

c10::impl::GenericDict loss_scaler_section(const LossScaler& scaler);
// The saved state, checked to be one `scaler` can take; throws CheckpointError naming `where` and the field.
LossScaler::State read_loss_scaler_section(const c10::impl::GenericDict& saved, const LossScaler& scaler,
                                           const std::string& where);

c10::impl::GenericDict scheduler_section(const LrScheduler& scheduler);
// The saved position, checked to be one of `scheduler`'s type (Python DeepSpeed's does not name its type).
LrSchedulerState read_scheduler_section(const c10::impl::GenericDict& saved, const LrScheduler& scheduler,
                                        const std::string& where);

}  // namespace deepspeed::runtime

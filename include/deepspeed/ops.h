// deepspeed-cpp's fused CPU optimizer kernels (DeepSpeed's `ops`): one include for the whole
// subsystem.
//
// ops/cpu_optimizer.h holds the step functions (Adam/AdamW, SGD, Adagrad, Lion) over flat fp32
// tensors; ops/simd.h holds SIMD-variant selection (DS_SIMD) and the kernel report that `ds_report`
// prints.
#pragma once

#include "deepspeed/ops/cpu_optimizer.h"
#include "deepspeed/ops/muon.h"
#include "deepspeed/ops/simd.h"

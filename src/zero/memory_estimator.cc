#include "deepspeed/zero/memory_estimator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

// Above this the byte counts (at most ~20 bytes per parameter) could overflow int64_t; 1e15
// parameters is thousands of times any model trained today.
constexpr int64_t kMaxParams = 1000000000000000LL;

constexpr int64_t kFp32Bytes = 4;
constexpr int64_t kAdamStateBytes = 8;  // exp_avg + exp_avg_sq, fp32

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_common(int64_t num_params, int num_ranks, int stage) {
  DS_CHECK(num_params >= 1, "estimate_model_states_mem_needs: num_params must be >= 1, got ",
           num_params);
  DS_CHECK(num_params <= kMaxParams,
           "estimate_model_states_mem_needs: num_params must be <= ", kMaxParams, ", got ",
           num_params);
  DS_CHECK(num_ranks >= 1, "estimate_model_states_mem_needs: num_ranks must be >= 1, got ",
           num_ranks);
  DS_CHECK(stage >= 0 && stage <= 3,
           "estimate_model_states_mem_needs: stage must be 0, 1, 2 or 3, got ", stage);
}

int64_t working_bytes(Precision precision) {
  return precision == Precision::kFp32 ? kFp32Bytes : 2;
}

// Adds `bytes` to the offload destination `target`.
void add_offloaded(MemoryEstimate& e, OffloadTarget target, int64_t bytes) {
  if (target == OffloadTarget::kCpu) e.offloaded_cpu += bytes;
  if (target == OffloadTarget::kNvme) e.offloaded_nvme += bytes;
}

}  // namespace

int64_t MemoryEstimate::total() const {
  return params + gradients + master_weights + optimizer_states + working_buffers;
}

int64_t MemoryEstimate::host_and_device() const { return total() + offloaded_cpu; }

int64_t flat_numel(const std::vector<int64_t>& param_numels) {
  int64_t total = 0;
  for (size_t i = 0; i < param_numels.size(); ++i) {
    DS_CHECK(param_numels[i] >= 0, "flat_numel: param_numels[", i, "] must be >= 0, got ",
             param_numels[i]);
    total = ceil_div(total + param_numels[i], kFlatAlignment) * kFlatAlignment;
  }
  return total;
}

int64_t padded_numel(int64_t numel, int world_size) {
  DS_CHECK(numel >= 0, "padded_numel: numel must be >= 0, got ", numel);
  DS_CHECK(world_size >= 1, "padded_numel: world_size must be >= 1, got ", world_size);
  return ceil_div(numel, world_size) * world_size;
}

MemoryEstimate estimate_model_states_mem_needs(int64_t num_params, int num_ranks, int stage,
                                               Precision precision, OffloadTarget offload_optimizer,
                                               OffloadTarget offload_param,
                                               int64_t largest_layer_params,
                                               int64_t reduce_bucket_size) {
  check_common(num_params, num_ranks, stage);
  DS_CHECK(offload_optimizer == OffloadTarget::kNone || stage >= 1,
           "estimate_model_states_mem_needs: offload_optimizer=",
           offload_target_name(offload_optimizer), " needs ZeRO stage 1, 2 or 3, got stage 0");
  DS_CHECK(offload_param == OffloadTarget::kNone || stage == 3,
           "estimate_model_states_mem_needs: offload_param=", offload_target_name(offload_param),
           " needs ZeRO stage 3, got stage ", stage);
  DS_CHECK(largest_layer_params >= 0,
           "estimate_model_states_mem_needs: largest_layer_params must be >= 0, got ",
           largest_layer_params);
  DS_CHECK(reduce_bucket_size >= 0 && reduce_bucket_size <= kMaxParams,
           "estimate_model_states_mem_needs: reduce_bucket_size (zero_optimization.reduce_bucket_size) must be in 0..",
           kMaxParams, " (its two fp32 buffers are counted in bytes), got ", reduce_bucket_size);
  DS_CHECK(largest_layer_params <= kMaxParams, "estimate_model_states_mem_needs: largest_layer_params must be <= ",
           kMaxParams, ", got ", largest_layer_params);

  const int64_t w = working_bytes(precision);
  const bool mixed = precision != Precision::kFp32;
  MemoryEstimate e;
  if (stage == 0) {
    e.params = w * num_params;
    e.gradients = kFp32Bytes * num_params;  // fp32 accumulation in every precision
    e.master_weights = mixed ? kFp32Bytes * num_params : 0;
    e.optimizer_states = kAdamStateBytes * num_params;
    return e;
  }

  const int64_t full = padded_numel(num_params, num_ranks);
  const int64_t part = full / num_ranks;
  e.params = stage == 3 ? w * part : w * full;
  e.gradients = stage == 1 ? kFp32Bytes * full : kFp32Bytes * part;
  if (stage == 2) e.working_buffers = 2 * reduce_bucket_size * kFp32Bytes;
  if (stage == 3) e.working_buffers = largest_layer_params * w;

  if (offload_optimizer == OffloadTarget::kNone) {
    e.master_weights = mixed ? kFp32Bytes * part : 0;
    e.optimizer_states = kAdamStateBytes * part;
  } else {
    // The CPU optimizer needs an fp32 master of its own even in fp32 training, and reads the rank's
    // fp32 gradient partition from host memory; above stage 1 that partition is the only gradient
    // storage.
    add_offloaded(e, offload_optimizer, kFp32Bytes * part + kAdamStateBytes * part);
    e.offloaded_cpu += kFp32Bytes * part;
    if (stage >= 2) e.gradients = 0;
  }
  if (offload_param != OffloadTarget::kNone) {
    add_offloaded(e, offload_param, e.params);
    e.params = 0;
  }
  return e;
}

MemoryEstimate estimate_model_states_mem_needs_paper(int64_t num_params, int num_ranks, int stage) {
  check_common(num_params, num_ranks, stage);
  const int64_t part = ceil_div(num_params, num_ranks);
  MemoryEstimate e;
  e.params = 2 * (stage == 3 ? part : num_params);
  e.gradients = 2 * (stage >= 2 ? part : num_params);
  e.master_weights = kFp32Bytes * (stage >= 1 ? part : num_params);
  e.optimizer_states = kAdamStateBytes * (stage >= 1 ? part : num_params);
  return e;
}

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", value, kUnits[unit]);
  return buf;
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

const char* offload_target_name(OffloadTarget target) {
  switch (target) {
    case OffloadTarget::kNone:
      return "none";
    case OffloadTarget::kCpu:
      return "cpu";
    case OffloadTarget::kNvme:
      return "nvme";
  }
  return "?";
}

namespace {

struct Row {
  std::string stage, options;
  MemoryEstimate estimate;
};

std::string options_label(OffloadTarget offload_optimizer, OffloadTarget offload_param) {
  std::string label = std::string("offload_optimizer=") + offload_target_name(offload_optimizer);
  if (offload_param != OffloadTarget::kNone) {
    label += std::string(", offload_param=") + offload_target_name(offload_param);
  }
  return label;
}

// One table line; `width` is the options column's width, so labels of any length stay aligned.
std::string table_line(const std::vector<std::string>& cells, int width) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "%5s | %-*s | %10s | %10s | %10s | %10s | %10s | %10s | %10s | %10s | %10s\n",
                cells[0].c_str(), width, cells[1].c_str(), cells[2].c_str(), cells[3].c_str(),
                cells[4].c_str(), cells[5].c_str(), cells[6].c_str(), cells[7].c_str(),
                cells[8].c_str(), cells[9].c_str(), cells[10].c_str());
  return line;
}

}  // namespace

std::string format_memory_estimates(int64_t num_params, int num_ranks,
                                    const EstimateTableOptions& options) {
  check_common(num_params, num_ranks, 0);
  DS_CHECK(options.num_nodes >= 1, "format_memory_estimates: num_nodes must be >= 1, got ",
           options.num_nodes);
  DS_CHECK(num_ranks % options.num_nodes == 0, "format_memory_estimates: num_ranks (", num_ranks,
           ") must be a multiple of num_nodes (", options.num_nodes, ")");
  const int ranks_per_node = num_ranks / options.num_nodes;

  std::vector<Row> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    if (options.paper_formula) {
      rows.push_back({std::to_string(stage), "paper (K = 12)",
                      estimate_model_states_mem_needs_paper(num_params, num_ranks, stage)});
      continue;
    }
    // Stage 0 cannot offload; its row shows what the others are measured against.
    const OffloadTarget offload = stage == 0 ? OffloadTarget::kNone : options.offload_optimizer;
    rows.push_back(
        {std::to_string(stage), options_label(offload, OffloadTarget::kNone),
         estimate_model_states_mem_needs(num_params, num_ranks, stage, options.precision, offload,
                                         OffloadTarget::kNone, options.largest_layer_params,
                                         options.reduce_bucket_size)});
  }
  if (!options.paper_formula && options.offload_optimizer != OffloadTarget::kNone) {
    const OffloadTarget offload = options.offload_optimizer;
    rows.push_back({"3", options_label(offload, offload),
                    estimate_model_states_mem_needs(num_params, num_ranks, 3, options.precision,
                                                    offload, offload, options.largest_layer_params,
                                                    options.reduce_bucket_size)});
  }
  int width = 7;
  for (const Row& row : rows) width = std::max(width, static_cast<int>(row.options.size()));

  std::ostringstream os;
  os << "Estimated memory per rank for model states (params, gradients, master weights, optimizer "
        "states):\n";
  os << "HW: " << options.num_nodes << " node(s), " << ranks_per_node
     << " rank(s) per node, world size " << num_ranks << ".\n";
  char millions[32];
  std::snprintf(millions, sizeof(millions), "%.2fM", static_cast<double>(num_params) / 1e6);
  os << "SW: model with " << millions << " (" << num_params << ") params, ";
  if (options.paper_formula) {
    os << "ZeRO paper formulas (mixed precision, Adam K = 12, 2-byte gradients).\n";
  } else {
    os << precision_name(options.precision)
       << (options.precision == Precision::kFp32 ? "" : " mixed precision")
       << ", Adam, deepspeed-cpp layout (fp32 gradients).\n";
  }
  os << table_line({"stage", "options", "params", "grads", "master", "optimizer", "buffers",
                    "device", "cpu/rank", "nvme/rank", "cpu/node"},
                   width);
  for (const Row& row : rows) {
    const MemoryEstimate& e = row.estimate;
    os << table_line(
        {row.stage, row.options, format_bytes(e.params), format_bytes(e.gradients),
         format_bytes(e.master_weights), format_bytes(e.optimizer_states),
         format_bytes(e.working_buffers), format_bytes(e.total()), format_bytes(e.offloaded_cpu),
         format_bytes(e.offloaded_nvme), format_bytes(e.offloaded_cpu * ranks_per_node)},
        width);
  }
  os << "device = params + grads + master + optimizer + buffers; cpu/node = cpu/rank x ranks per "
        "node.\n";
  if (!options.paper_formula && options.largest_layer_params == 0) {
    os << "Stage 3's gathered largest layer is not counted: pass its parameter count.\n";
  }
  return os.str();
}

}  // namespace deepspeed::zero

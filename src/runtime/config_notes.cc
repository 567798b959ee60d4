#include "runtime/config_notes.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

std::optional<config::DataType> model_data_type(const torch::nn::Module& module) {
  bool bf16 = false, fp16 = false, any = false;
  for (const auto& p : module.parameters()) {
    any = true;
    bf16 = bf16 || p.scalar_type() == at::kBFloat16;
    fp16 = fp16 || p.scalar_type() == at::kHalf;
  }
  DS_CHECK_T(ConfigError, !(bf16 && fp16),
             "fp16.enabled / bf16.enabled \"auto\": the model has both bf16 and fp16 parameters; give the precision "
             "in the config");
  if (!any) return std::nullopt;
  return bf16 ? config::DataType::kBf16 : fp16 ? config::DataType::kFp16 : config::DataType::kFp32;
}

void print_config_notes(const Config& config, const std::vector<config::AutoResolution>& filled) {
  if (comm::get_rank() != 0) return;
  for (const std::string& w : config.warnings()) std::fprintf(stderr, "deepspeed: warning: %s\n", w.c_str());
  for (const auto& r : filled)
    std::fprintf(stderr, "deepspeed: \"auto\" %s = %s (%s)\n", r.path.c_str(), r.value.c_str(), r.how.c_str());
  // The curriculum cuts the batches before they reach the engine, as DeepSpeed's does: say who must apply it.
  if (const config::CurriculumMetricConfig* c = config.data_efficiency.seqlen_curriculum())
    std::fprintf(stderr,
                 "deepspeed: data_efficiency: a sequence-length curriculum from %lld to %lld tokens (%s); the training "
                 "loop cuts each step's batches with deepspeed::data::SeqlenCurriculum\n",
                 static_cast<long long>(*c->min_difficulty), static_cast<long long>(*c->max_difficulty),
                 c->schedule_type.c_str());
}

}  // namespace deepspeed::runtime

// Config::resolve_auto: every "auto" outside the batch keys filled from what the program knows,
// as DeepSpeed's Hugging Face integration fills it (transformers' integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig), or refused by name. See deepspeed/config/auto_values.h.
#include <cmath>
#include <functional>

#include "config/key_catalog.h"
#include "config/sections.h"

namespace deepspeed::config {
namespace {

const char kZero[] = "zero_optimization.";
// What Hugging Face's Trainer fills with its default TrainingArguments (transformers' TrainingArguments).
constexpr double kTrainerMaxGradNorm = 1.0;
constexpr double kTrainerLr = 5e-5;
constexpr double kTrainerBetas[2] = {0.9, 0.999};
constexpr double kTrainerEps = 1e-8;
constexpr int64_t kTrainerMicroBatch = 8;  // per_device_train_batch_size

// Shortest text that reads back as `d` (integers without a fraction), as a JSON writer prints it.
std::string number_text(double d) {
  if (std::floor(d) == d && std::fabs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
  return Json(d).dump();
}

std::string value_text(const ParamValue& v) {
  if (v.kind() == ParamValue::Kind::kNumber) return number_text(v.number_value());
  if (v.kind() == ParamValue::Kind::kNumberList) return Json(v.number_list_value()).dump();
  return v.to_string();
}

std::string how_to_give(const std::string& field, const std::string& tool_flag) {
  return "pass it as InitializeOptions::auto_values." + field + " (ds_check_config " + tool_flag +
         ")";
}

// Resolves one "auto" at `path`; returns false with `why` (what to put instead) when it cannot.
class Resolver {
 public:
  Resolver(Config& c, const AutoValues& known) : c_(c), known_(known) {}

  std::vector<AutoResolution> done;

  bool top_level(const std::string& path, std::string* why) {
    const bool stage3 = c_.zero.stage == 3;
    if (path == std::string(kZero) + "reduce_bucket_size") {
      return from_hidden(
          path, why, [](int64_t h) { return h * h; }, "hidden_size^2", &c_.zero.reduce_bucket_size);
    }
    if (path == std::string(kZero) + "stage3_prefetch_bucket_size" && stage3) {
      // The integration's own expression, int(0.9 * hidden_size * hidden_size), evaluated left to
      // right in doubles as Python does, so both give the same integer.
      return from_hidden(
          path, why,
          [](int64_t h) {
            return static_cast<int64_t>(0.9 * static_cast<double>(h) * static_cast<double>(h));
          },
          "int(0.9 * hidden_size^2)", &c_.zero.prefetch_bucket_size);
    }
    if (path == std::string(kZero) + "stage3_param_persistence_threshold" && stage3) {
      return from_hidden(
          path, why, [](int64_t h) { return 10 * h; }, "10 * hidden_size",
          &c_.zero.param_persistence_threshold);
    }
    if (path == std::string(kZero) + "stage3_gather_16bit_weights_on_model_save") {
      c_.zero.gather_16bit_weights_on_model_save = false;
      add(path, "false", "accelerate's default zero3_save_16bit_model, as the Trainer fills it");
      return true;
    }
    if (path.rfind(std::string(kZero) + "stage3_", 0) == 0 && !stage3) {
      add(path, stage3_value(path), "not used below stage 3: DeepSpeed's default kept");
      return true;
    }
    if (path == "gradient_clipping") {
      if (!known_.gradient_clipping) {
        c_.gradient_clipping = kTrainerMaxGradNorm;
        add(path, number_text(c_.gradient_clipping), "Hugging Face Trainer's default max_grad_norm");
        return true;
      }
      if (!std::isfinite(*known_.gradient_clipping) || *known_.gradient_clipping < 0) {
        *why = "AutoValues::gradient_clipping must be a number >= 0, got " +
               number_text(*known_.gradient_clipping);
        return false;
      }
      c_.gradient_clipping = *known_.gradient_clipping;
      add(path, number_text(c_.gradient_clipping), "AutoValues::gradient_clipping");
      return true;
    }
    if (path == "fp16.enabled" || path == "bf16.enabled") {
      const DataType wanted = path == "fp16.enabled" ? DataType::kFp16 : DataType::kBf16;
      const bool on = known_.model_dtype && *known_.model_dtype == wanted;
      (path == "fp16.enabled" ? c_.fp16.enabled : c_.bf16.enabled) = on;
      add(path, on ? "true" : "false",
          known_.model_dtype ? std::string("AutoValues::model_dtype ") + to_string(*known_.model_dtype)
                             : "Hugging Face Trainer's default (no --" + path.substr(0, 4) + " flag)");
      return true;
    }
    *why = "deepspeed-cpp has no value to fill it from; put a number, e.g. " +
           std::to_string(int_default(path)) + " (DeepSpeed's default)";
    return false;
  }

  bool param(const std::string& section, Params& params, const std::string& type,
             const std::string& name, std::string* why) {
    const std::string path = section + ".params." + name;
    std::optional<double> value;
    std::string how;
    if (section == "optimizer" && name == "betas") {
      params.set(name, ParamValue::number_list({kTrainerBetas[0], kTrainerBetas[1]}));
      add(path, "[0.9, 0.999]", "Hugging Face Trainer's default adam_beta1, adam_beta2");
      return true;
    }
    if (section == "optimizer" && name == "lr") {
      value = known_.lr.value_or(kTrainerLr);
      how = known_.lr ? "AutoValues::lr" : "Hugging Face Trainer's default learning_rate";
    } else if (section == "optimizer" && (name == "eps" || name == "weight_decay")) {
      value = name == "eps" ? kTrainerEps : 0.0;
      how = "Hugging Face Trainer's default " + std::string(name == "eps" ? "adam_epsilon" : "weight_decay");
    } else if (section == "scheduler" && name == "warmup_max_lr") {
      value = known_.lr;
      how = "AutoValues::lr, as the integration fills it";
      // Without one, the optimizer's own learning rate is the same number.
      if (!value && c_.optimizer && c_.optimizer->params.has("lr") &&
          c_.optimizer->params.values().at("lr").kind() == ParamValue::Kind::kNumber) {
        value = c_.optimizer->params.get_number("lr", 0.0);
        how = "optimizer.params.lr";
      }
      if (!value) {
        value = kTrainerLr;
        how = "Hugging Face Trainer's default learning_rate";
      }
    } else if (section == "scheduler" && name == "warmup_min_lr") {
      value = 0.0;
      how = "0, as the integration fills it";
    } else if (section == "scheduler" && name == "warmup_num_steps") {
      value = 0.0;
      how = "Hugging Face Trainer's default warmup_steps";
    } else if (section == "scheduler" && name == "total_num_steps") {
      if (known_.total_num_steps) value = static_cast<double>(*known_.total_num_steps);
      how = "AutoValues::total_num_steps (InitializeOptions::total_steps)";
    } else {
      const std::optional<ParamValue> fallback = default_param(section, type, name);
      *why = "deepspeed-cpp has no value to fill it from; put " +
             (fallback ? "a value, e.g. " + value_text(*fallback) + " (DeepSpeed's default)"
                       : std::string("a value"));
      return false;
    }
    if (!value) {
      const bool steps = name == "total_num_steps";
      *why = steps ? "needs the run's optimizer steps: pass InitializeOptions::total_steps (or "
                     "auto_values.total_num_steps; ds_check_config --set " +
                         path +
                         "=N), or put "
                         "a number here"
                   : "needs the learning rate from the program: " +
                         how_to_give("lr", "--set " + path + "=3e-4") + ", or put a number here";
      return false;
    }
    if (!std::isfinite(*value) || *value < 0) {
      *why = how + " must be a number >= 0, got " + number_text(*value);
      return false;
    }
    params.set(name, ParamValue::number(*value));
    add(path, number_text(*value), how);
    return true;
  }

 private:
  void add(const std::string& path, const std::string& value, const std::string& how) {
    done.push_back(AutoResolution{path, value, how});
  }

  bool from_hidden(const std::string& path, std::string* why,
                   const std::function<int64_t(int64_t)>& formula, const std::string& name,
                   int64_t* out) {
    if (!known_.hidden_size) {
      *why = "needs the model's hidden size: " + how_to_give("hidden_size", "--hidden_size N") +
             ", or put a number here";
      return false;
    }
    const int64_t h = *known_.hidden_size;
    if (h < 1 || h > 3000000000LL) {  // h^2 must fit in int64
      *why = "AutoValues::hidden_size must be in 1..3000000000, got " + std::to_string(h);
      return false;
    }
    *out = formula(h);
    add(path, std::to_string(*out), name + ", hidden_size " + std::to_string(h));
    return true;
  }

  int64_t* stage3_field(const std::string& path) {
    const std::string key = path.substr(std::string(kZero).size());
    if (key == "stage3_prefetch_bucket_size") return &c_.zero.prefetch_bucket_size;
    if (key == "stage3_param_persistence_threshold") return &c_.zero.param_persistence_threshold;
    if (key == "stage3_model_persistence_threshold") return &c_.zero.model_persistence_threshold;
    if (key == "stage3_max_live_parameters") return &c_.zero.max_live_parameters;
    if (key == "stage3_max_reuse_distance") return &c_.zero.max_reuse_distance;
    return nullptr;
  }

  std::string stage3_value(const std::string& path) {
    const int64_t* field = stage3_field(path);
    return field ? std::to_string(*field) : "?";
  }

  // DeepSpeed's default of an integer "auto" key we cannot fill (the field still holds it).
  int64_t int_default(const std::string& path) {
    if (const int64_t* field = stage3_field(path)) return *field;
    if (path == std::string(kZero) + "allgather_bucket_size") return c_.zero.allgather_bucket_size;
    return 0;
  }

  Config& c_;
  const AutoValues& known_;
};

}  // namespace

std::vector<AutoResolution> Config::resolve_auto(const AutoValues& known) {
  Config next = *this;
  Resolver r(next, known);
  std::vector<std::pair<std::string, std::string>> refused;  // path, what to put instead
  for (const std::string& path : auto_keys_) {
    std::string why;
    if (r.top_level(path, &why)) {
      next.clear_auto(path);
    } else {
      refused.emplace_back(path, why);
    }
  }
  auto resolve_params = [&](const std::string& section, auto& section_config) {
    if (!section_config) return;
    const Params params(section_config->params);  // named: values() refers into it
    for (const auto& [name, value] : params.values()) {
      if (!value.is_auto()) continue;
      std::string why;
      if (!r.param(section, section_config->params, section_config->type, name, &why)) {
        refused.emplace_back(section + ".params." + name, why);
      }
    }
  };
  resolve_params("optimizer", next.optimizer);
  resolve_params("scheduler", next.scheduler);
  // Batch keys given as "auto" that the others cannot solve (neither train_batch_size nor the micro-batch is a
  // number): the Trainer's per_device_train_batch_size and gradient_accumulation_steps defaults.
  if (!next.train_batch_size && !next.train_micro_batch_size_per_gpu &&
      auto_batch_keys_.count("train_micro_batch_size_per_gpu")) {
    next.train_micro_batch_size_per_gpu = kTrainerMicroBatch;
    r.done.push_back({"train_micro_batch_size_per_gpu", std::to_string(kTrainerMicroBatch),
                      "Hugging Face Trainer's default per_device_train_batch_size"});
    if (!next.gradient_accumulation_steps && auto_batch_keys_.count("gradient_accumulation_steps")) {
      next.gradient_accumulation_steps = 1;
      r.done.push_back({"gradient_accumulation_steps", "1", "Hugging Face Trainer's default"});
    }
  }
  if (!refused.empty()) {
    std::string message = refused[0].first + ": \"auto\" " + refused[0].second;
    if (refused.size() > 1) {
      message += " (also \"auto\":";
      for (size_t i = 1; i < refused.size(); ++i)
        message += (i > 1 ? ", " : " ") + refused[i].first;
      message += ")";
    }
    throw ConfigError(message);
  }
  check_consistency(next);  // the filled precision flags against each other and tensor_parallel.dtype
  *this = std::move(next);
  return r.done;
}

std::string auto_values_markdown() {
  // Each row is what resolve_auto itself prints for an example: the table shows the code's behaviour, not a second
  // description of it.
  struct Example {
    std::string given;
    std::string config;
    AutoValues known;
  };
  const std::string optimizer =
      R"("optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
          "weight_decay": "auto"}})";
  AutoValues model;
  model.hidden_size = 4096;
  AutoValues program;
  program.lr = 3e-4;
  program.gradient_clipping = 0.5;
  program.total_num_steps = 1000;
  program.model_dtype = DataType::kBf16;
  const std::vector<Example> examples = {
      {"hidden_size 4096, stage 3",
       R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
           "stage3_param_persistence_threshold": "auto", "stage3_gather_16bit_weights_on_model_save": "auto"}})",
       model},
      {"stage 2", R"({"zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto"}})", {}},
      {"nothing",
       R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "gradient_clipping": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, )" +
           optimizer +
           R"(, "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
           "warmup_num_steps": "auto"}}})",
       {}},
      {"lr 3e-4, clipping 0.5, total_num_steps 1000, model bf16",
       R"({"gradient_clipping": "auto", "bf16": {"enabled": "auto"},
           "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
           "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": "auto",
           "total_num_steps": "auto"}}})",
       program},
  };
  std::string out = "| key | given | becomes |\n| --- | --- | --- |\n";
  for (const Example& e : examples) {
    Config c = Config::from_string(e.config);
    for (const AutoResolution& r : c.resolve_auto(e.known))
      out += "| `" + r.path + "` | " + e.given + " | `" + r.value + "` (" + r.how + ") |\n";
  }
  return out;
}

}  // namespace deepspeed::config

// run_autotuner(): see autotuning/autotuner.h. The search logic is in autotuning.h; this file runs
// it against real training runs started through the launcher.
#include "autotuning/autotuner.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autotuning/command_line.h"
#include "autotuning/trial_process.h"
#include "autotuning/autotuning.h"
#include "deepspeed/config.h"
#include "config/feature_gate.h"
#include "config/small_file.h"

namespace deepspeed::autotuning {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr double kDefaultTrialTimeout = 600;

std::string read_text(const std::string& path) {
  std::string text;
  const std::string why = config::read_small_file(path, &text);
  DS_CHECK(why.empty(), "cannot read ", path, ": ", why);
  return text;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  DS_CHECK(out.good(), "cannot write ", path);
}

std::string this_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  DS_CHECK(n > 0, "cannot find the deepspeed executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

// Host memory available now (MemAvailable of /proc/meminfo), in bytes; 0 when unknown.
int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || !*v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  DS_CHECK(end != v && *end == '\0' && s > 0 && s <= 1e7, name, "='", v,
           "' must be a number of seconds in (0, 1e7]");
  return s;
}

const char* metric_key(const std::string& metric) {
  return metric == "flops" ? "FLOPS_per_gpu" : metric == "latency" ? "latency" : "throughput";
}

std::string describe_bytes(int64_t b) {
  char buf[32];
  const double mib = static_cast<double>(b) / (1024.0 * 1024);
  if (mib < 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", mib);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", mib / 1024);
  }
  return buf;
}

// Thrown through tune() (which records std::exceptions as failed trials) when the autotuner is
// signalled: the search ends there.
struct Interrupted {
  int signal;
};

// Fails now, naming the key, if `dir` cannot take files: better than every trial failing later.
void check_writable(const std::string& dir, const char* key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string probe = dir + "/.deepspeed_write_test";
  std::ofstream out(probe);
  const bool ok = !ec && out.good() && (out << "x").good();
  out.close();
  fs::remove(probe, ec);
  DS_CHECK_T(ConfigError, ok, "autotuning.", key, ": cannot write to ", dir);
}

class Autotuner {
 public:
  Autotuner(const launcher::LauncherArgs& args, const std::vector<std::string>& argv)
      : args_(args), argv_(argv) {}

  int run() {
    DS_CHECK(!args_.no_ssh && args_.world_info.empty() && args_.node_rank < 0,
             "--autotuning runs the whole job from one launcher: drop --no_ssh, --node_rank and "
             "--world_info");
    config_arg_ = find_config_arg(args_.user_args);
    const config::Config parsed = config::Config::from_file(config_arg_.path);
    at_ = parsed.autotuning;
    try {
      user_ = Json::parse(read_text(config_arg_.path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_arg_.path + ": invalid JSON: " + e.what());
    }
    flags_ = launcher_flags_without_autotuning(argv_, args_.user_args.size());
    self_ = this_executable();
    timeout_ = env_seconds("DS_AUTOTUNING_TRIAL_TIMEOUT", kDefaultTrialTimeout);

    const launcher::ResourcePool pool =
        launcher::active_resources(args_, launcher::fetch_hostfile(args_.hostfile));
    const int world = launcher::world_size(pool);
    DS_CHECK_T(ConfigError, world % at_.mp_size == 0, "autotuning.mp_size: ", at_.mp_size,
               " does not divide the ", world, " ranks");
    dp_world_ = world / at_.mp_size;
    check_writable(at_.exps_dir, "exps_dir");
    check_writable(at_.results_dir, "results_dir");

    SearchInputs in;
    in.autotuning = at_;
    in.world_size = dp_world_;
    in.stages = zero_stages_to_tune(user_);
    in.offload = user_offload(user_);
    in.precision = parsed.bf16.enabled   ? zero::Precision::kBf16
                   : parsed.fp16.enabled ? zero::Precision::kFp16
                                         : zero::Precision::kFp32;
    in.train_batch_size = fixed_train_batch_size();
    DS_CHECK_T(ConfigError, at_.metric != "latency" || in.train_batch_size.has_value(),
               "autotuning.metric: latency (seconds per step) compares configs only at one "
               "batch size; set train_batch_size (or gradient_accumulation_steps) in the config, "
               "or tune throughput");
    in.memory_per_rank_bytes = memory_per_rank(static_cast<int>(pool.at(0).slots.size()));
    in.num_params = model_params(in.stages.back(), &in.largest_layer_params);
    in.reduce_bucket_size = std::min<int64_t>(parsed.zero.reduce_bucket_size, in.num_params);
    SearchSpace space = build_search_space(in);
    screen(space);
    if (!space.candidates.empty()) {  // a bad arg_mappings is one error now, not N failed trials
      command_for("ds_config.json", trial_config(user_, space.candidates[0], dp_world_, "m.json"));
    }
    std::printf(
        "autotuning: %zu candidates (%zu pruned: model states above %s per rank, or refused by "
        "the engine), %d ranks, %lld parameters, metric %s, tuner %s\n",
        space.candidates.size(), space.pruned.size(),
        describe_bytes(in.memory_per_rank_bytes).c_str(), dp_world_,
        static_cast<long long>(in.num_params), at_.metric.c_str(), at_.tuner_type.c_str());
    std::fflush(stdout);

    std::vector<TrialResult> results = space.pruned;
    std::vector<TrialResult> history;
    try {
      history = tune(space, at_, [&](const Candidate& c) { return run_trial(c); });
    } catch (const Interrupted& i) {
      std::fprintf(stderr, "deepspeed: autotuning interrupted by signal %d after %d trials\n",
                   i.signal, trials_);
      return 128 + i.signal;
    }
    results.insert(results.end(), history.begin(), history.end());
    const std::string table = results_table(results, at_.metric);
    std::printf("%s", table.c_str());  // before writing it: a full disk must not lose it
    std::fflush(stdout);
    write_text(at_.results_dir + "/summary.txt", table);
    const std::optional<TrialResult> best = best_trial(results, at_.metric);
    DS_CHECK(best.has_value(), "autotuning: no trial succeeded; see ", at_.results_dir,
             "/summary.txt and the logs under ", at_.exps_dir);

    const std::string optimal = at_.results_dir + "/ds_config_optimal.json";
    const Json optimal_json = optimal_config(user_, best->candidate, dp_world_);
    write_text(optimal, optimal_json.dump(2) + "\n");
    const std::vector<std::string> final_argv = command_for(optimal, optimal_json);
    std::string cmd;
    for (const std::string& a : final_argv) cmd += (cmd.empty() ? "" : " ") + a;
    write_text(at_.results_dir + "/cmd_optimal.txt", cmd + "\n");
    std::printf("autotuning: best %s; config %s\n", best->candidate.name().c_str(),
                optimal.c_str());
    std::fflush(stdout);
    if (args_.autotuning != "run") return 0;

    std::printf("autotuning: running %s\n", cmd.c_str());
    std::fflush(stdout);
    std::vector<char*> c_argv;
    std::vector<std::string> copy = final_argv;
    for (std::string& a : copy) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    return launcher::main(static_cast<int>(copy.size()), c_argv.data());
  }

 private:
  // `deepspeed <flags> program <args with the config replaced and arg_mappings applied>`.
  std::vector<std::string> command_for(const std::string& config_path, const Json& config) const {
    std::vector<std::string> program_args = with_config(args_.user_args, config_arg_, config_path);
    if (at_.arg_mappings)
      program_args = apply_arg_mappings(program_args, *at_.arg_mappings, config);
    std::vector<std::string> argv = {self_};
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    argv.push_back(args_.user_script);
    argv.insert(argv.end(), program_args.begin(), program_args.end());
    return argv;
  }

  // The global batch the user fixed: train_batch_size, or micro batch x accumulation when the
  // config sets gradient_accumulation_steps (DeepSpeed likewise keeps the user's batch); nullopt
  // when only a micro batch is given (it is what the search varies).
  std::optional<int64_t> fixed_train_batch_size() const {
    auto int_at = [&](const char* key) -> std::optional<int64_t> {
      if (user_.contains(key) && user_[key].is_number_integer()) return user_[key].get<int64_t>();
      return std::nullopt;
    };
    if (auto tbs = int_at("train_batch_size")) return tbs;
    const auto gas = int_at("gradient_accumulation_steps");
    if (!gas) return std::nullopt;
    return int_at("train_micro_batch_size_per_gpu").value_or(1) * *gas * dp_world_;
  }

  // Parameters one model-parallel rank holds: autotuning.model_info.num_params, or 12 x num_layers
  // x hidden_size^2 (a transformer's blocks) from model_info, or what a short run at `stage`
  // reports. hidden_size also gives stage 3's largest gathered layer (one block, 12 h^2).
  int64_t model_params(int stage, int64_t* largest_layer) {
    const auto& info = at_.model_info;
    const bool hidden = info && info->hidden_size.has_value();
    const bool layers = info && info->num_layers.has_value();
    DS_CHECK_T(ConfigError, hidden == layers,
               "autotuning.model_info: give both hidden_size and num_layers (they estimate the "
               "parameters and stage 3's largest layer), or neither");
    if (hidden) *largest_layer = 12 * *info->hidden_size * *info->hidden_size;
    if (info && info->num_params) return std::max<int64_t>(1, *info->num_params / at_.mp_size);
    if (hidden) {
      const int64_t n = 12 * *info->num_layers * *info->hidden_size * *info->hidden_size;
      std::printf("autotuning: %lld parameters estimated as 12 x num_layers x hidden_size^2\n",
                  static_cast<long long>(n));
      return std::max<int64_t>(1, n / at_.mp_size);
    }
    const std::string dir = at_.exps_dir + "/profile_model_info";
    fs::create_directories(dir);
    Candidate c;
    c.zero_stage = stage;
    c.micro_batch = at_.min_train_micro_batch_size_per_gpu;
    if (const auto users = user_offload(user_)) {
      c.offload_optimizer = stage >= 1 ? users->first : zero::OffloadTarget::kNone;
      c.offload_param = stage == 3 ? users->second : zero::OffloadTarget::kNone;
    }
    Json config = trial_config(user_, c, dp_world_, dir + "/metrics.json");
    config["autotuning"].erase("metric_path");
    config["autotuning"]["model_info"] = Json{{"profile", true}};
    const std::string info_path = dir + "/model_info.json";
    config["autotuning"]["model_info_path"] = info_path;
    write_text(dir + "/ds_config.json", config.dump(2) + "\n");
    std::printf("autotuning: measuring the model (set autotuning.model_info.num_params to skip)\n");
    std::fflush(stdout);
    const TrialOutcome out = run_trial_process(command_for(dir + "/ds_config.json", config),
                                               dir + "/stdout.log", info_path, timeout_);
    if (out.kind == TrialOutcome::Kind::kInterrupted) throw Interrupted{out.signal};
    DS_CHECK(out.kind == TrialOutcome::Kind::kReported,
             "autotuning: the run that measures the model failed (", out.detail,
             "); set autotuning.model_info.num_params");
    try {
      return Json::parse(out.report).at("num_params").get<int64_t>();
    } catch (const nlohmann::json::exception&) {
      throw Error("autotuning: " + info_path + " holds no num_params");
    }
  }

  // Moves the candidates the engine would refuse (a user key that does not combine with the
  // candidate's stage or offload) to the pruned list, with the engine's reason.
  void screen(SearchSpace& space) const {
    std::vector<Candidate> kept;
    for (const Candidate& c : space.candidates) {
      try {
        config::Config cfg =
            config::Config::from_string(trial_config(user_, c, dp_world_, "m.json").dump());
        cfg.resolve_batch(dp_world_);
        config::check_supported_features(cfg);
        kept.push_back(c);
      } catch (const ConfigError& e) {
        TrialResult r;
        r.candidate = c;
        r.status = TrialStatus::kPruned;
        r.detail = std::string("refused by the engine: ") + e.what();
        space.pruned.push_back(r);
      }
    }
    space.candidates = kept;
  }

  int64_t memory_per_rank(int local_ranks) const {
    if (const char* v = std::getenv("DS_AUTOTUNING_MEMORY_PER_RANK"); v != nullptr && *v) {
      return parse_bytes(v, "DS_AUTOTUNING_MEMORY_PER_RANK");
    }
    return available_memory() / std::max(1, local_ranks);
  }

  TrialResult run_trial(const Candidate& c) {
    const std::string dir = at_.exps_dir + "/" + c.name();
    const std::string metrics = dir + "/metrics.json";
    TrialResult r;
    r.candidate = c;
    ++trials_;
    const Json config = trial_config(user_, c, dp_world_, metrics);
    if (!at_.overwrite && fs::exists(metrics) && same_config(dir + "/ds_config.json", config)) {
      r = from_report(c, read_text(metrics));
      if (r.status == TrialStatus::kOk) r.detail = "from an earlier run (overwrite false)";
    } else {
      fs::create_directories(dir);
      fs::remove(metrics);
      write_text(dir + "/ds_config.json", config.dump(2) + "\n");
      const TrialOutcome out = run_trial_process(command_for(dir + "/ds_config.json", config),
                                                 dir + "/stdout.log", metrics, timeout_);
      switch (out.kind) {
        case TrialOutcome::Kind::kInterrupted:
          throw Interrupted{out.signal};
        case TrialOutcome::Kind::kReported:
          r = from_report(c, out.report);
          break;
        case TrialOutcome::Kind::kOutOfMemory:
          r.status = TrialStatus::kOutOfMemory;
          break;
        case TrialOutcome::Kind::kTimeout:
          r.status = TrialStatus::kTimeout;
          break;
        case TrialOutcome::Kind::kExited:
          r.status = TrialStatus::kFailed;
          break;
      }
      if (out.kind != TrialOutcome::Kind::kReported) r.detail = out.detail;
    }
    if (r.status == TrialStatus::kOk) {
      std::printf("autotuning: trial %d %s: %s %g\n", trials_, c.name().c_str(), at_.metric.c_str(),
                  r.metric);
    } else {
      std::printf("autotuning: trial %d %s: %s (%s)\n", trials_, c.name().c_str(),
                  trial_status_name(r.status), r.detail.c_str());
    }
    std::fflush(stdout);
    return r;
  }

  // An earlier run's result counts only if it ran this very config (same stage, batch, world,
  // profile window, metric and every user key).
  static bool same_config(const std::string& path, const Json& config) {
    try {
      return Json::parse(read_text(path)) == config;
    } catch (const std::exception&) {
      return false;
    }
  }

  TrialResult from_report(const Candidate& c, const std::string& report) const {
    TrialResult r;
    r.candidate = c;
    try {
      r.metric = Json::parse(report).at(metric_key(at_.metric)).get<double>();
      r.status = TrialStatus::kOk;
    } catch (const nlohmann::json::exception&) {
      r.status = TrialStatus::kFailed;
      r.detail = std::string("the metrics file has no ") + metric_key(at_.metric);
    }
    return r;
  }

  const launcher::LauncherArgs& args_;
  const std::vector<std::string>& argv_;
  ConfigArg config_arg_;
  config::AutotuningConfig at_;
  Json user_;
  std::vector<std::string> flags_;
  std::string self_;
  double timeout_ = kDefaultTrialTimeout;
  int dp_world_ = 1;
  int trials_ = 0;
};

}  // namespace

int run_autotuner(const launcher::LauncherArgs& args, const std::vector<std::string>& argv) {
  return Autotuner(args, argv).run();
}

}  // namespace deepspeed::autotuning

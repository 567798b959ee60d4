// DeepSpeed's checkpoint layout written from the fp32 partition contract (deepspeed_export.h).
#include "checkpoint/deepspeed_export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/python_pickle.h"
#include "checkpoint/python_pickle_writer.h"

namespace deepspeed::checkpoint {
namespace {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;
using nlohmann::json;

constexpr const char* kLossScalerClass = "deepspeed.runtime.fp16.loss_scaler.LossScaler";
constexpr const char* kFragmentClass = "deepspeed.utils.tensor_fragment.fragment_address";
constexpr const char* kZeroStageEnum = "deepspeed.runtime.zero.config.ZeroStageEnum";

c10::IValue from_json(const json& j) {
  if (j.is_object()) {
    GenericDict d = make_any_dict();
    for (auto it = j.begin(); it != j.end(); ++it) d.insert(it.key(), from_json(it.value()));
    return d;
  }
  if (j.is_array()) {
    GenericList l = make_any_list();
    for (const json& v : j) l.push_back(from_json(v));
    return l;
  }
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  return c10::IValue();
}

c10::IValue tuple_of(std::vector<c10::IValue> items) { return c10::ivalue::Tuple::create(std::move(items)); }

std::optional<c10::IValue> get(const StateDict& d, const char* key) {
  auto it = d.find(key);
  if (it == d.end()) return std::nullopt;
  return it->value();
}

int64_t get_int(const StateDict& d, const char* key, int64_t fallback) {
  auto v = get(d, key);
  return v && v->isInt() ? v->toInt() : fallback;
}

// A parameter group as DeepSpeed will see it: names (Python's) and our index entries, in order.
struct Group {
  std::vector<std::string> names;
  std::vector<const SavedParam*> params;
  double lr = 0.0;
  double weight_decay = 0.0;
};

// The optimizer's numbers as a torch param group (AdamW's keys, plus bias_correction and step for DeepSpeed's own
// Adam, which reads them from the group). `params`: indices into the state.
struct Hyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool adamw = true;
  int64_t step = 0;
};

GenericDict param_group(const Hyper& h, const Group& g, std::vector<int64_t> params) {
  GenericDict pg = make_any_dict();
  pg.insert(std::string("lr"), g.lr);
  pg.insert(std::string("betas"), tuple_of({h.beta1, h.beta2}));
  pg.insert(std::string("eps"), h.eps);
  pg.insert(std::string("weight_decay"), g.weight_decay);
  pg.insert(std::string("amsgrad"), false);
  pg.insert(std::string("maximize"), false);
  pg.insert(std::string("foreach"), c10::IValue());
  pg.insert(std::string("capturable"), false);
  pg.insert(std::string("differentiable"), false);
  pg.insert(std::string("fused"), c10::IValue());
  pg.insert(std::string("decoupled_weight_decay"), h.adamw);
  pg.insert(std::string("bias_correction"), true);
  pg.insert(std::string("step"), h.step);
  GenericList p = make_any_list();
  for (int64_t i : params) p.push_back(i);
  pg.insert(std::string("params"), p);
  return pg;
}

GenericDict adam_state(const Hyper& h, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq) {
  GenericDict s = make_any_dict();
  s.insert(std::string("step"), at::scalar_tensor(static_cast<double>(h.step), at::kFloat));
  s.insert(std::string("exp_avg"), exp_avg);
  s.insert(std::string("exp_avg_sq"), exp_avg_sq);
  return s;
}

GenericDict loss_scaler_object() {
  GenericDict a = make_any_dict();
  a.insert(std::string("cur_scale"), 1.0);
  a.insert(std::string("dynamic"), false);
  return py_object(kLossScalerClass, a).toGenericDict();
}

class Exporter {
 public:
  Exporter(const std::string& dir, const std::string& tag, const std::string& out_dir,
           const DeepSpeedExportOptions& options, FileSystem* fs)
      : out_dir_(out_dir), map_(options.name_map), fs_(fs), elastic_(options.elastic) {
    for (const std::string& name : fs->list_dir(tag_dir(dir, tag)))
      DS_CHECK_T(CheckpointError, name.rfind("layer_", 0) != 0 && name.rfind("expp_rank_", 0) != 0,
                 "checkpoint ", tag_dir(dir, tag), " holds ", name,
                 ": pipeline and MoE checkpoints cannot be exported to DeepSpeed's layout");
    index_ = load_any_partition_index(dir, tag, fs, &translated_);
    model_ = translated_ ? translated_->model : read_model_states(dir, tag, {}, 0, fs, &model_file_);
    if (translated_) model_file_ = translated_->model_file;
    stage3_source_ = fs->file_exists(zero_model_states_path(dir, tag, 0));
    optimizers_ = rank_optimizer_states(index_);
    read_config();
    world_ = options.world_size.value_or(static_cast<int>(get_int(model_, "dp_world_size", 0)));
    stage_ = options.zero_stage.value_or(static_cast<int>(get_int(model_, "zero_stage", -1)));
    DS_CHECK_T(CheckpointError, world_ >= 1, "checkpoint file ", model_file_,
               " does not say its data-parallel world size: give the world size to export for");
    DS_CHECK_T(CheckpointError, stage_ >= 0 && stage_ <= 3, "checkpoint file ", model_file_,
               " does not say its ZeRO stage (got ", stage_, "): give the stage to export for (0..3)");
    read_groups();
  }

  DeepSpeedExportStats run(const DeepSpeedExportOptions& options) {
    fs_->create_dirs(out_dir_);
    DS_CHECK_T(CheckpointError, !options.only_rank || (*options.only_rank >= 0 && *options.only_rank < world_),
               "export to DeepSpeed's layout: rank ", options.only_rank.value_or(0), " of ", world_);
    const bool writes_model = options.only_rank.value_or(0) == 0;
    if (stage_ < 3 && writes_model) write(out_dir_ + "/mp_rank_00_model_states.pt", model_file(true));
    for (int r = 0; r < world_ && stage_ > 0; ++r) {
      if (options.only_rank && *options.only_rank != r) continue;
      if (stage_ == 3) write(zero_path(r, "model_states.pt", false), model_file(false));
      write(zero_path(r, "optim_states.pt", bf16_), optim_file(r));
      ++stats_.ranks;
    }
    for (const Group& g : groups_) stats_.params += static_cast<int64_t>(g.params.size());
    if (!options.write_latest) return stats_;
    std::string save_dir = out_dir_;
    while (save_dir.size() > 1 && save_dir.back() == '/') save_dir.pop_back();
    const size_t slash = save_dir.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : save_dir.substr(0, slash);
    const std::string out_tag = slash == std::string::npos ? save_dir : save_dir.substr(slash + 1);
    write_file_atomic(parent + "/latest", out_tag.data(), out_tag.size(), fs_);
    return stats_;
  }

 private:
  std::string mapped(const std::string& name) const { return map_ ? map_(name) : name; }

  std::string zero_path(int r, const char* suffix, bool bf16_prefix) const {
    return out_dir_ + "/" + (bf16_prefix ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_" +
           suffix;
  }

  void write(const std::string& path, const c10::IValue& value) {
    write_file_atomic(
        path, [&](WritableFile& f) { write_python_archive(value, [&](const char* d, size_t n) { f.append(d, n); }); },
        fs_);
  }

  at::Tensor counted(at::Tensor t) {
    stats_.bytes += t.numel() * static_cast<int64_t>(t.element_size());
    return t;
  }

  // zero_optimization.elastic_checkpoint: each group's state without its padding, in a list, as DeepSpeed saves it
  // at stages 1-2 (DeepSpeed 0.19 still loads it at the saved world size only); not on its BF16_Optimizer (stage 1
  // with bf16 parameters, fp32 gradient accumulation and no cpu optimizer offload: with nvme it still takes it),
  // whose files are rigid whatever the key says.
  bool elastic_form() const {
    auto at = [](const json& o, const char* key) { return o.is_object() && o.contains(key) ? o[key] : json(); };
    const json zero = at(config_, "zero_optimization");
    if (stage_ < 1 || stage_ > 2 || !elastic_.value_or(at(zero, "elastic_checkpoint") == json(true))) return false;
    const bool cpu_offload = at(at(zero, "offload_optimizer"), "device") == "cpu";
    return !(stage_ == 1 && bf16_ && at(at(config_, "data_types"), "grad_accum_dtype") == "fp32" && !cpu_offload);
  }

  void read_config() {
    std::string dtype = "fp32";
    if (auto d = get(model_, "dtype"); d && d->isString()) dtype = d->toStringRef();
    DS_CHECK_T(CheckpointError, dtype == "fp32" || dtype == "bf16", "checkpoint file ", model_file_, " is ", dtype,
               ": only fp32 and bf16 checkpoints can be exported to DeepSpeed's layout");
    bf16_ = dtype == "bf16";
    if (auto c = get(model_, "ds_config"); c && c->isString()) {
      config_ = json::parse(c->toStringRef(), nullptr, /*allow_exceptions=*/false);
      if (config_.is_discarded()) config_ = json::object();
    }
    const json opt = config_.value("optimizer", json::object());
    const json p = opt.value("params", json::object());
    std::string type = opt.value("type", std::string("adamw"));
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    if (p.contains("betas") && p["betas"].is_array() && p["betas"].size() == 2) {
      hyper_.beta1 = p["betas"][0].get<double>();
      hyper_.beta2 = p["betas"][1].get<double>();
    }
    hyper_.eps = p.value("eps", 1e-8);
    hyper_.weight_decay = p.value("weight_decay", 0.0);
    hyper_.adamw = type == "adamw" || p.value("adam_w_mode", true);
    const std::vector<std::string>& names = optimizers_.at(0).names;
    DS_CHECK_T(CheckpointError, names == std::vector<std::string>({"exp_avg", "exp_avg_sq"}), "checkpoint file ",
               index_.files.at(0), ": only Adam/AdamW optimizer states (exp_avg, exp_avg_sq) can be exported to "
               "DeepSpeed's layout; this checkpoint holds ", names.size(), " other state(s)");
    auto it = index_.states.at(0).find("optimizer_state_dict");
    if (it != index_.states.at(0).end())
      if (auto s = dict_get(it->value(), std::string("step")); s && s->isInt()) hyper_.step = s->toInt();
  }

  // Groups as the model file's param_shapes gives them (ours: a list of {name: shape} dicts), with each group's
  // learning rate and weight decay from rank 0's file; a translated DeepSpeed tag: its parameters in one group.
  void read_groups() {
    std::vector<c10::IValue> param_groups;
    if (auto it = index_.states.at(0).find("optimizer_state_dict"); it != index_.states.at(0).end())
      if (auto pgs = dict_get(it->value(), std::string("param_groups")); pgs && pgs->isList())
        for (const c10::IValue& pg : pgs->toList()) param_groups.push_back(pg);
    auto number = [](const std::optional<c10::IValue>& v, double fallback) {
      return v && (v->isDouble() || v->isInt()) ? (v->isDouble() ? v->toDouble() : static_cast<double>(v->toInt()))
                                                : fallback;
    };
    auto add = [&](Group g, size_t i) {
      const c10::IValue pg = i < param_groups.size() ? param_groups[i] : c10::IValue(make_any_dict());
      g.lr = number(dict_get(pg, std::string("lr")), config_lr());
      g.weight_decay = number(dict_get(pg, std::string("weight_decay")), hyper_.weight_decay);
      groups_.push_back(std::move(g));
    };
    auto shapes = get(model_, "param_shapes");
    if (shapes && shapes->isList() && !translated_) {
      for (const c10::IValue& group : shapes->toList()) {
        Group g;
        for (const auto& e : group.toGenericDict()) {
          const SavedParam* p = index_.find(e.key().toStringRef());
          DS_CHECK_T(CheckpointError, p != nullptr, "checkpoint file ", model_file_, ": parameter '",
                     e.key().toStringRef(), "' of param_shapes is in no rank file");
          g.names.push_back(mapped(p->name));
          g.params.push_back(p);
        }
        add(std::move(g), groups_.size());
      }
    } else {
      // A translated DeepSpeed tag: its param groups are the flat groups its fragments sit in (stages 0-2). At
      // stage 3 a flat group is a sub-group, of which a param group may hold several: one group only there.
      std::map<size_t, Group> by_group;
      for (const SavedParam& p : index_.params) {
        Group& g = by_group[p.fragments.empty() ? 0 : p.fragments.front().group];
        g.names.push_back(mapped(p.name));
        g.params.push_back(&p);
      }
      DS_CHECK_T(CheckpointError, by_group.size() == 1 || !stage3_source_, "checkpoint ", model_file_,
                 " is a DeepSpeed stage-3 checkpoint with ", by_group.size(), " sub-groups, whose parameter groups "
                 "cannot be told apart; convert it with ds_to_universal instead");
      for (auto& [index, g] : by_group) add(std::move(g), index);
    }
    // Every indexed parameter in exactly one group, or DeepSpeed's partitions would be cut from another model.
    size_t n = 0;
    for (const Group& g : groups_) n += g.params.size();
    DS_CHECK_T(CheckpointError, n == index_.params.size(), "checkpoint file ", model_file_, ": param_shapes names ",
               n, " parameters, the rank files ", index_.params.size());
  }

  double config_lr() const {
    const json p = config_.value("optimizer", json::object()).value("params", json::object());
    return p.value("lr", 1e-3);
  }

  // Elements [begin, end) of `p` as fp32 master and Adam states (zero beyond the parameter's end).
  void copy(const SavedParam& p, int64_t begin, int64_t end, const at::Tensor& fp32, const at::Tensor& m,
            const at::Tensor& v) {
    const int64_t hi = std::min(end, p.numel);
    if (hi <= begin) return;
    copy_param_elements(index_, optimizers_, p, begin, hi, fp32.narrow(0, 0, hi - begin),
                        {m.narrow(0, 0, hi - begin), v.narrow(0, 0, hi - begin)});
  }

  at::ScalarType model_dtype() const { return bf16_ ? at::kBFloat16 : at::kFloat; }

  // The whole fp32 master of `p`, shaped; its Adam states too when `m` and `v` are given (stage 0 only: the
  // model file of stages 1-2 needs the weights alone).
  at::Tensor master(const SavedParam& p, at::Tensor* m = nullptr, at::Tensor* v = nullptr) {
    at::Tensor fp32 = at::empty({p.numel}, at::kFloat);
    if (!m) {
      copy_param_elements(index_, optimizers_, p, 0, p.numel, fp32, {});
      return fp32.view(p.shape);
    }
    at::Tensor mm = at::empty({p.numel}, at::kFloat), vv = at::empty({p.numel}, at::kFloat);
    copy(p, 0, p.numel, fp32, mm, vv);
    *m = mm.view(p.shape);
    *v = vv.view(p.shape);
    return fp32.view(p.shape);
  }

  // The model file: `module` with the weights (or, at stage 3, empty placeholders) and buffers, and the engine's
  // keys; client state merged into the top level as DeepSpeed does.
  c10::IValue model_file(bool with_weights) {
    GenericDict module = make_any_dict();
    GenericList param_shapes = make_any_list();
    GenericList all_state_params = make_any_list();
    GenericDict optimizer_state = make_any_dict();
    GenericList fp32_groups = make_any_list(), torch_groups = make_any_list();
    int64_t index = 0;
    for (const Group& g : groups_) {
      GenericDict shapes = make_any_dict();
      GenericList masters = make_any_list();
      std::vector<int64_t> ids;
      for (size_t i = 0; i < g.params.size(); ++i) {
        const SavedParam& p = *g.params[i];
        shapes.insert(g.names[i], py_size(p.shape));
        if (!with_weights) {
          module.insert(g.names[i], at::empty({0}, model_dtype()));
          continue;
        }
        at::Tensor m, v;
        const at::Tensor fp32 = stage_ == 0 ? master(p, &m, &v) : master(p);
        module.insert(g.names[i], counted(fp32.to(model_dtype())));
        if (stage_ == 0) {
          optimizer_state.insert(index, adam_state(hyper_, counted(m), counted(v)));
          if (bf16_) masters.push_back(counted(fp32));
          ids.push_back(index++);
        }
      }
      param_shapes.push_back(py_ordered_dict(shapes));
      if (stage_ == 0) {
        torch_groups.push_back(param_group(hyper_, g, ids));
        fp32_groups.push_back(masters);
      }
    }
    std::vector<std::string> buffer_names;
    if (auto saved = get(model_, kModuleKey); saved && saved->isGenericDict())
      if (auto names = get(model_, kBufferNamesKey); names && names->isList())
        for (const c10::IValue& n : names->toList()) {
          auto t = saved->toGenericDict().find(n.toStringRef());
          DS_CHECK_T(CheckpointError, t != saved->toGenericDict().end() && t->value().isTensor(), "checkpoint file ",
                     model_file_, ": buffer '", n.toStringRef(), "' is not in its module");
          module.insert(mapped(n.toStringRef()), t->value().toTensor());
          buffer_names.push_back(mapped(n.toStringRef()));
        }

    GenericDict out = make_any_dict();
    out.insert(std::string("module"), py_ordered_dict(module));
    GenericList buffers = make_any_list();
    for (const std::string& b : buffer_names) buffers.push_back(b);
    out.insert(std::string("buffer_names"), buffers);
    if (stage_ == 0) {
      GenericDict torch_sd = make_any_dict();
      torch_sd.insert(std::string("state"), optimizer_state);
      torch_sd.insert(std::string("param_groups"), torch_groups);
      // FP16_Optimizer (unfused), which DeepSpeed runs for bf16 at stage 0. Its own runs count one Adam step more
      // than they took (it steps once with zero gradients when built); the file holds the updates applied.
      if (bf16_) {
        GenericDict fp16 = make_any_dict();
        fp16.insert(std::string("dynamic_loss_scale"), false);
        fp16.insert(std::string("cur_scale"), 1.0);
        fp16.insert(std::string("cur_iter"), get_int(model_, "global_steps", 0));
        fp16.insert(std::string("optimizer_state_dict"), torch_sd);
        fp16.insert(std::string("fp32_groups"), fp32_groups);
        out.insert(std::string("optimizer"), fp16);
      } else {
        out.insert(std::string("optimizer"), torch_sd);
      }
      out.insert(std::string("param_shapes"), c10::IValue());
    } else {
      out.insert(std::string("optimizer"), c10::IValue());
      out.insert(std::string("param_shapes"), param_shapes);
    }
    const c10::IValue frozen = stage_ >= 2 ? py_ordered_dict(make_any_dict()) : c10::IValue();
    out.insert(std::string("frozen_param_shapes"), frozen);
    out.insert(std::string("shared_params"), stage_ >= 1 ? c10::IValue(make_any_dict()) : c10::IValue());
    out.insert(std::string("frozen_param_fragments"), frozen);
    c10::IValue scheduler;
    if (auto s = get(model_, "lr_scheduler"); s && s->isGenericDict())
      if (auto it = dict_get(*s, std::string("last_batch_iteration"))) {
        GenericDict d = make_any_dict();
        d.insert(std::string("last_batch_iteration"), *it);
        scheduler = d;
      }
    out.insert(std::string("lr_scheduler"), scheduler);
    out.insert(std::string("data_sampler"), c10::IValue());
    out.insert(std::string("random_ltd"), c10::IValue());
    out.insert(std::string("skipped_steps"), get_int(model_, "skipped_steps", 0));
    out.insert(std::string("global_steps"), get_int(model_, "global_steps", 0));
    out.insert(std::string("global_samples"), get_int(model_, "global_samples", 0));
    out.insert(std::string("dp_world_size"), static_cast<int64_t>(world_));
    out.insert(std::string("mp_world_size"), int64_t{1});
    GenericDict dims = make_any_dict();
    dims.insert(std::string("pp_degree"), int64_t{1});
    dims.insert(std::string("tp_degree"), int64_t{1});
    out.insert(std::string("checkpoint_parallel_dimensions"), dims);
    out.insert(std::string("ds_config"), from_json(config_));
    out.insert(std::string("ds_version"), std::string(kDeepSpeedLayoutVersion));
    if (auto client = get(model_, "client_state"); client && client->isGenericDict())
      for (const auto& e : client->toGenericDict()) {
        DS_CHECK_T(CheckpointError, !e.key().isString() || !out.contains(e.key()), "checkpoint file ", model_file_,
                   ": client state key '", e.key(), "' collides with a key DeepSpeed's engine writes");
        out.insert(e.key(), e.value());
      }
    return out;
  }

  c10::IValue optim_file(int r) {
    GenericDict inner = make_any_dict();
    GenericDict state = make_any_dict();
    GenericList torch_groups = make_any_list();
    GenericList flats = make_any_list();
    int64_t index = 0;
    const int64_t w = world_;
    if (stage_ < 3) {
      const bool elastic = elastic_form();
      stats_.elastic = elastic;
      GenericList paddings = make_any_list(), alignment = make_any_list(), counts = make_any_list(),
                  mappings = make_any_list(), elastic_groups = make_any_list();
      for (const Group& g : groups_) {
        int64_t total = 0;
        for (const SavedParam* p : g.params) total += p->numel;
        const int64_t align = 2 * w;
        const int64_t part = (total + align - 1) / align * align / w;
        const int64_t begin = r * part, length = std::max<int64_t>(0, std::min(total, begin + part) - begin);
        at::Tensor fp32 = at::zeros({part}, at::kFloat), m = at::zeros({part}, at::kFloat),
                   v = at::zeros({part}, at::kFloat);
        GenericDict slices = make_any_dict();
        GenericList zeros = make_any_list();
        int64_t offset = 0;
        for (size_t i = 0; i < g.params.size(); ++i) {
          const SavedParam& p = *g.params[i];
          zeros.push_back(int64_t{0});
          const int64_t lo = std::max(begin, offset), hi = std::min(begin + length, offset + p.numel);
          if (lo < hi) {
            copy(p, lo - offset, hi - offset, fp32.narrow(0, lo - begin, hi - lo), m.narrow(0, lo - begin, hi - lo),
                 v.narrow(0, lo - begin, hi - lo));
            GenericDict a = make_any_dict();
            a.insert(std::string("numel"), hi - lo);
            a.insert(std::string("start"), lo - begin);
            slices.insert(g.names[i], py_object(kFragmentClass, a));
          }
          offset += p.numel;
        }
        if (elastic) {
          elastic_groups.push_back(
              adam_state(hyper_, counted(m.narrow(0, 0, length)), counted(v.narrow(0, 0, length))));
        } else {
          state.insert(index, adam_state(hyper_, counted(m), counted(v)));
          torch_groups.push_back(param_group(hyper_, g, {index++}));
        }
        flats.push_back(counted(fp32.narrow(0, 0, length)));
        paddings.push_back(part - length);
        alignment.push_back(zeros);
        counts.push_back(w);
        mappings.push_back(py_ordered_dict(slices));
      }
      inner.insert(std::string("loss_scaler"), loss_scaler_object());
      inner.insert(std::string("dynamic_loss_scale"), false);
      inner.insert(std::string("overflow"), false);
      inner.insert(std::string("clip_grad"), config_.value("gradient_clipping", 1.0));  // DeepSpeed's default
      if (elastic) {
        inner.insert(std::string("base_optimizer_state"), elastic_groups);
        // DeepSpeed writes it only for optimizers with a step in their param groups (its FusedAdam, which leaves 0
        // there and counts in each state), yet its elastic load requires it and puts it back in the groups:
        // written always, with the true step, so any DeepSpeed optimizer resumes from the file.
        inner.insert(std::string("base_optimizer_state_step"), hyper_.step);
      } else {
        GenericDict torch_sd = make_any_dict();
        torch_sd.insert(std::string("state"), state);
        torch_sd.insert(std::string("param_groups"), torch_groups);
        inner.insert(std::string("base_optimizer_state"), torch_sd);
      }
      inner.insert(std::string("single_partition_of_fp32_groups"), flats);
      inner.insert(std::string("zero_stage"), py_call(kZeroStageEnum, {int64_t{stage_}}));
      inner.insert(std::string("group_paddings"), paddings);
      inner.insert(std::string("param_alignment_paddings"), alignment);
      inner.insert(std::string("partition_count"), counts);
      inner.insert(std::string("ds_version"), std::string(kDeepSpeedLayoutVersion));
      inner.insert(std::string("param_slice_mappings"), mappings);
    } else {
      // Sub-groups of at most sub_group_size partition elements, as DeepSpeed's stage 3 cuts each group.
      const auto sub_group_size = config_.value("zero_optimization", json::object()).value("sub_group_size",
                                                                                           int64_t{1000000000});
      for (const Group& g : groups_) {
        std::vector<int64_t> ids;
        size_t i = 0;
        while (i < g.params.size()) {
          std::vector<size_t> members;
          int64_t size = 0;
          while (i < g.params.size()) {
            members.push_back(i);
            size += (g.params[i]->numel + w - 1) / w;
            ++i;
            if (size >= sub_group_size) break;
          }
          at::Tensor fp32 = at::zeros({size}, at::kFloat), m = at::zeros({size}, at::kFloat),
                     v = at::zeros({size}, at::kFloat);
          int64_t offset = 0;
          for (size_t k : members) {
            const SavedParam& p = *g.params[k];
            const int64_t slice = (p.numel + w - 1) / w;
            copy(p, r * slice, (r + 1) * slice, fp32.narrow(0, offset, slice), m.narrow(0, offset, slice),
                 v.narrow(0, offset, slice));
            offset += slice;
          }
          state.insert(index, adam_state(hyper_, counted(m), counted(v)));
          flats.push_back(counted(fp32));
          ids.push_back(index++);
        }
        torch_groups.push_back(param_group(hyper_, g, ids));
      }
      inner.insert(std::string("zero_stage"), py_call(kZeroStageEnum, {int64_t{3}}));
      inner.insert(std::string("loss_scaler"), loss_scaler_object());
      inner.insert(std::string("dynamic_loss_scale"), false);
      inner.insert(std::string("overflow"), false);
      inner.insert(std::string("partition_count"), w);
      GenericDict torch_sd = make_any_dict();
      torch_sd.insert(std::string("state"), state);
      torch_sd.insert(std::string("param_groups"), torch_groups);
      inner.insert(std::string("optimizer_state_dict"), torch_sd);
      inner.insert(std::string("fp32_flat_groups"), flats);
    }
    GenericDict out = make_any_dict();
    out.insert(std::string("optimizer_state_dict"), inner);
    out.insert(std::string("ds_config"), from_json(config_));
    out.insert(std::string("ds_version"), std::string(kDeepSpeedLayoutVersion));
    return out;
  }

  std::string out_dir_;
  CheckpointNameMap map_;
  FileSystem* fs_;
  std::optional<ForeignTag> translated_;
  PartitionIndex index_;
  StateDict model_ = make_state_dict();
  std::string model_file_;
  std::vector<RankOptimizerStates> optimizers_;
  json config_ = json::object();
  Hyper hyper_;
  bool bf16_ = false;
  std::optional<bool> elastic_;  // DeepSpeedExportOptions::elastic
  bool stage3_source_ = false;  // <tag> holds per-rank model files (a stage-3 save)
  int world_ = 0;
  int stage_ = 0;
  std::vector<Group> groups_;
  DeepSpeedExportStats stats_;
};

}  // namespace

DeepSpeedExportStats write_deepspeed_tag(const std::string& dir, const std::string& tag_in, const std::string& out_dir,
                                         const DeepSpeedExportOptions& options, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string tag = resolve_tag(dir, tag_in.empty() ? std::nullopt : std::optional<std::string>(tag_in), fs);
  return Exporter(dir, tag, out_dir, options, fs).run(options);
}

}  // namespace deepspeed::checkpoint

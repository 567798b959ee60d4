// load_hf_weights and save_hf_folder (deepspeed/models/hf_checkpoint.h).
#include "deepspeed/models/hf_checkpoint.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/safetensors_reader.h"
#include "checkpoint/safetensors_writer.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "deepspeed/zero.h"
#include "zero/stage3/construction_shard.h"

namespace deepspeed::models {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::SafetensorsFile;
using checkpoint::SafetensorsTensor;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

struct Source {
  const SafetensorsFile* file;
  const SafetensorsTensor* entry;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  DS_CHECK_T(CheckpointError, in.good(), path, ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The files of the folder and, for each tensor name, where it is.
std::map<std::string, Source> open_folder(const std::string& dir,
                                          std::vector<std::unique_ptr<SafetensorsFile>>& files) {
  std::map<std::string, Source> where;
  const fs::path index = fs::path(dir) / kIndex;
  if (!fs::exists(index)) {
    const fs::path single = fs::path(dir) / kSingle;
    DS_CHECK_T(CheckpointError, fs::exists(single), dir, ": no ", kSingle, " or ", kIndex,
               " (weights in pytorch_model.bin are not read: save them with transformers' save_pretrained, which "
               "writes safetensors)");
    files.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const SafetensorsTensor& t : files.back()->tensors()) where[t.name] = {files.back().get(), &t};
    return where;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(index.string()));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(index.string() + ": not JSON (" + e.what() + ")");
  }
  DS_CHECK_T(CheckpointError, j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
             ": has no weight_map object");
  std::map<std::string, const SafetensorsFile*> by_name;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    DS_CHECK_T(CheckpointError, file.is_string(), index.string(), ": weight_map[\"", tensor, "\"] is not a file name");
    const std::string name = file.get<std::string>();
    DS_CHECK_T(CheckpointError, name.find('/') == std::string::npos, index.string(), ": weight_map[\"", tensor,
               "\"] names \"", name, "\" outside the folder");
    if (by_name.count(name) == 0) {
      files.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / name).string()));
      by_name[name] = files.back().get();
    }
    const SafetensorsFile* f = by_name[name];
    const SafetensorsTensor* t = f->find(tensor);
    DS_CHECK_T(CheckpointError, t != nullptr, index.string(), ": names ", name, " for tensor '", tensor,
               "', which that file does not hold");
    where[tensor] = {f, t};
  }
  return where;
}

// Tensors transformers' own loading drops for these models.
bool ignorable(const std::string& name, const std::map<std::string, at::Tensor>& expected) {
  if (name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0) return true;
  return name == "lm_head.weight" && expected.count("lm_head.weight") == 0 &&
         expected.count("model.embed_tokens.weight") > 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Tensor-parallel splits by parameter: rank r of T holds slice r of dimension `dim`, of each of `fused` equal blocks.
std::map<const void*, tp::SplitParameter> splits_of(const torch::nn::Module& model) {
  std::map<const void*, tp::SplitParameter> out;
  for (tp::SplitParameter& p : tp::split_parameters(model)) out[p.param.unsafeGetTensorImpl()] = p;
  return out;
}

std::vector<int64_t> whole_shape(const tp::SplitParameter& s) {
  std::vector<int64_t> shape = s.param.sizes().vec();
  shape[s.dim] *= s.group.size();
  return shape;
}

// This rank's slice of `full` for the split `s`.
at::Tensor slice_of(const at::Tensor& full, const tp::SplitParameter& s) {
  std::vector<int64_t> blocks = full.sizes().vec();
  const int64_t block = blocks[s.dim] / s.fused_parts, part = block / s.group.size();
  blocks[s.dim] = block;
  blocks.insert(blocks.begin() + s.dim, s.fused_parts);
  return full.reshape(blocks).narrow(s.dim + 1, s.group.rank() * part, part).reshape(s.param.sizes());
}

// The whole tensor from every rank's slice (`mine`) of the split `s`. Collective over the split's group.
at::Tensor join(const at::Tensor& mine, const tp::SplitParameter& s) {
  std::vector<at::Tensor> parts;
  for (int r = 0; r < s.group.size(); ++r) parts.push_back(at::empty_like(mine));
  comm::ProcessGroup group = s.group;  // a handle: the same group
  group.all_gather(parts, mine.contiguous());
  // Each part [.., fused x part, ..]: block b of the whole is the concatenation of every rank's block b.
  std::vector<at::Tensor> blocks;
  const int64_t part = mine.size(s.dim) / s.fused_parts;
  for (int64_t b = 0; b < s.fused_parts; ++b)
    for (const at::Tensor& p : parts) blocks.push_back(p.narrow(s.dim, b * part, part));
  return at::cat(blocks, s.dim);
}

}  // namespace

void load_hf_weights(torch::nn::Module& model, const std::string& dir, const HfLoadOptions& options) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  const std::map<std::string, Source> where = open_folder(dir, files);
  std::map<std::string, at::Tensor> expected;  // by the folder's names
  auto hf = [&](const std::string& n) { return options.hf_name ? options.hf_name(n) : n; };
  for (const auto& item : model.named_parameters()) expected[hf(item.key())] = item.value();
  for (const auto& item : model.named_buffers()) expected[hf(item.key())] = item.value();
  // Parameters zero::Init partitioned while the model was built hold no elements here; their whole shapes are
  // zero::Init's.
  const std::shared_ptr<torch::nn::Module> root = model.shared_from_this();
  const auto whole = zero::construction_shapes(root);
  const auto splits = splits_of(model);
  auto shape_of = [&](const at::Tensor& t) {
    const auto it = whole.find(t.unsafeGetTensorImpl());
    if (it != whole.end()) return it->second;
    const auto split = splits.find(t.unsafeGetTensorImpl());
    return split != splits.end() ? whole_shape(split->second) : t.sizes().vec();
  };
  // Every check before the first copy: a refused folder leaves the model as it was.
  std::map<const void*, const Source*> source_of;
  for (const auto& [name, target] : expected) {
    const auto it = where.find(name);
    DS_CHECK_T(CheckpointError, it != where.end(), dir, ": no tensor '", name, "' in the folder's safetensors (",
               where.size(), " tensors; is it this model's folder?)");
    const SafetensorsTensor& e = *it->second.entry;
    DS_CHECK_T(CheckpointError, e.shape == shape_of(target), it->second.file->path(), ": tensor '", name,
               "' has shape ", shape_text(e.shape), ", the model's is ", shape_text(shape_of(target)));
    source_of[target.unsafeGetTensorImpl()] = &it->second;
  }
  for (const auto& [name, source] : where)
    DS_CHECK_T(CheckpointError, options.part_of_model || expected.count(name) > 0 || ignorable(name, expected),
               source.file->path(), ": tensor '", name, "' is not in the model (another architecture or config?)");
  at::NoGradGuard no_grad;
  // Partitioned units: each rank reads only the elements of its own partition (the pages of the mapping it touches).
  for (const auto& unit : zero::find_units(root))
    if (auto* shard = dynamic_cast<zero::ConstructionShard*>(unit->hooks().get()))
      shard->load_partition(
          [&](const at::Tensor& param, int64_t begin, int64_t count) {
            const Source& s = *source_of.at(param.unsafeGetTensorImpl());
            return s.file->tensor(*s.entry).reshape({-1}).narrow(0, begin, count);
          },
          [&](const at::Tensor& param) {
            const Source& s = *source_of.at(param.unsafeGetTensorImpl());
            s.file->drop_pages(*s.entry);
          });
  for (auto& [name, target] : expected) {
    if (whole.count(target.unsafeGetTensorImpl()) > 0) continue;
    const Source& s = *source_of.at(target.unsafeGetTensorImpl());
    const auto split = splits.find(target.unsafeGetTensorImpl());
    const at::Tensor full = s.file->tensor(*s.entry);
    target.copy_(split == splits.end() ? full : slice_of(full, split->second));
    s.file->drop_pages(*s.entry);
  }
}

void load_fp32_checkpoint(torch::nn::Module& model, const std::string& dir, const std::string& tag) {
  const std::shared_ptr<torch::nn::Module> root = model.shared_from_this();
  DS_CHECK_T(CheckpointError, zero::construction_shapes(root).empty(), dir,
             ": load_fp32_checkpoint does not fill ZeRO-3 partitions; load them with the engine's load_checkpoint");
  std::map<std::string, at::Tensor> expected;
  for (const auto& item : model.named_parameters()) expected[item.key()] = item.value();
  const auto splits = splits_of(model);
  auto shape_of = [&](const at::Tensor& t) {
    const auto split = splits.find(t.unsafeGetTensorImpl());
    return split != splits.end() ? whole_shape(split->second) : t.sizes().vec();
  };
  // First every name and shape (nothing read), so a refused checkpoint leaves the model untouched.
  std::set<std::string> seen;
  checkpoint::for_each_fp32_parameter(
      dir, tag, [&](const std::string& name, const std::vector<int64_t>& shape, const std::function<at::Tensor()>&) {
        const auto it = expected.find(name);
        DS_CHECK_T(CheckpointError, it != expected.end(), dir, ": parameter '", name,
                   "' of the checkpoint is not in the model (another architecture or config?)");
        DS_CHECK_T(CheckpointError, shape == shape_of(it->second), dir, ": parameter '", name, "' has shape ",
                   shape_text(shape), ", the model's is ", shape_text(shape_of(it->second)));
        seen.insert(name);
      });
  for (const auto& [name, target] : expected)
    DS_CHECK_T(CheckpointError, seen.count(name) > 0, dir, ": the checkpoint has no parameter '", name, "'");
  at::NoGradGuard no_grad;
  checkpoint::for_each_fp32_parameter(
      dir, tag, [&](const std::string& name, const std::vector<int64_t>&, const std::function<at::Tensor()>& read) {
        at::Tensor& target = expected.at(name);
        const auto split = splits.find(target.unsafeGetTensorImpl());
        const at::Tensor full = read();
        target.copy_(split == splits.end() ? full : slice_of(full, split->second));
      });
}

std::vector<std::pair<std::string, at::Tensor>> gather_hf_weights(
    torch::nn::Module& model, std::optional<at::ScalarType> dtype,
    const std::function<std::string(const std::string&)>& hf_name) {
  const auto splits = splits_of(model);
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  std::map<const void*, size_t> index;
  for (const auto& item : model.named_parameters()) {
    index[item.value().unsafeGetTensorImpl()] = params.size();
    names.push_back(hf_name ? hf_name(item.key()) : item.key());
    params.push_back(item.value());
  }
  std::vector<at::Tensor> whole(params.size());
  at::NoGradGuard no_grad;
  // The whole value of parameter i, while its unit is gathered (nothing to gather outside stage 3).
  auto take = [&](size_t i) {
    const at::Tensor p = params[i].detach();
    const auto split = splits.find(params[i].unsafeGetTensorImpl());
    const at::Tensor full = split == splits.end() ? p : join(p, split->second);
    if (!names[i].empty()) whole[i] = full.to(at::kCPU, dtype.value_or(p.scalar_type()), false, /*copy=*/true);
  };
  // Each ZeRO-3 unit gathered once for all its parameters, one unit at a time, then the parameters outside units.
  std::vector<bool> done(params.size(), false);
  for (const auto& unit : zero::find_units(model.shared_from_this())) {
    std::vector<size_t> mine;
    for (const at::Tensor& p : unit->parameters())
      if (!done[index.at(p.unsafeGetTensorImpl())]) mine.push_back(index.at(p.unsafeGetTensorImpl()));
    zero::GatheredParameters gathered(*unit);
    for (size_t i : mine) {
      take(i);
      done[i] = true;
    }
  }
  std::vector<at::Tensor> rest;
  for (size_t i = 0; i < params.size(); ++i)
    if (!done[i]) rest.push_back(params[i]);
  {
    zero::GatheredParameters gathered(rest);
    for (size_t i = 0; i < params.size(); ++i)
      if (!done[i]) take(i);
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (!names[i].empty()) out.emplace_back(names[i], whole[i]);
  return out;
}

namespace {

std::string shard_name(int index, int count) {
  if (count == 1) return kSingle;
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", index + 1, count);
  return name;
}

}  // namespace

void write_hf_shard(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& weights, int index,
                    int count, std::optional<at::ScalarType> dtype) {
  DS_CHECK(count >= 1 && index >= 0 && index < count, "write_hf_shard: shard ", index, " of ", count);
  fs::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> cpu;
  for (const auto& [name, t] : weights)
    cpu.emplace_back(name, t.detach().to(at::kCPU, dtype.value_or(t.scalar_type())).contiguous());
  checkpoint::save_safetensors((fs::path(dir) / shard_name(index, count)).string(), cpu, {{"format", "pt"}});
}

void write_hf_index(const std::string& dir, int count, const std::string& config_json) {
  std::set<std::string> written;
  std::optional<at::ScalarType> dtype;
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (int i = 0; i < count; ++i) {
    const std::string name = shard_name(i, count);
    const SafetensorsFile shard((fs::path(dir) / name).string());
    for (const SafetensorsTensor& t : shard.tensors()) {
      DS_CHECK_T(CheckpointError, !map.contains(t.name), dir, ": tensor '", t.name, "' is in ", name, " and in ",
                 map.value(t.name, std::string()));
      map[t.name] = name;
      total += t.end - t.begin;
      if (!dtype && at::isFloatingType(t.dtype)) dtype = t.dtype;
    }
    written.insert(name);
  }
  if (count > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    const std::string text = index.dump(2) + "\n";
    checkpoint::write_file_atomic((fs::path(dir) / kIndex).string(), text.data(), text.size());
    written.insert(kIndex);
  }
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_json);
  const at::ScalarType d = dtype.value_or(at::kFloat);
  const char* dtype_name = d == at::kBFloat16 ? "bfloat16" : d == at::kHalf ? "float16" : "float32";
  if (config.contains("torch_dtype")) config["torch_dtype"] = dtype_name;
  config["dtype"] = dtype_name;
  const std::string text = config.dump(2) + "\n";
  checkpoint::write_file_atomic((fs::path(dir) / "config.json").string(), text.data(), text.size());
  // A folder saved before with another sharding keeps no weight file transformers could load instead.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool weight_file =
        (name.rfind("model", 0) == 0 && entry.path().extension() == ".safetensors") || name == kIndex;
    if (weight_file && written.count(name) == 0) fs::remove(entry.path());
  }
}

void save_hf_folder(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& weights,
                    const std::string& config_json, const HfSaveOptions& options) {
  DS_CHECK(options.max_shard_bytes > 0, "save_hf_folder: max_shard_bytes must be > 0");
  DS_CHECK(!weights.empty(), "save_hf_folder: no weights to save");
  // Shards in the given order, each up to max_shard_bytes (a larger tensor alone in its shard).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t in_shard = 0;
  for (const auto& [name, t] : weights) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(c10::elementSize(options.dtype.value_or(t.scalar_type())));
    if (in_shard > 0 && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, t);
    in_shard += bytes;
  }
  const int count = static_cast<int>(shards.size());
  for (int i = 0; i < count; ++i) write_hf_shard(dir, shards[i], i, count, options.dtype);
  write_hf_index(dir, count, config_json);
}

}  // namespace deepspeed::models

// consolidate_fp32: every rank's fp32 partitions of a tag merged into one safetensors or torch.save file (the
// engine's side of the contract is in include/deepspeed/checkpoint.h). Rank files are mapped, so
// reading the metadata of all ranks costs their pickles only; each parameter is then assembled (or,
// when one fragment holds it all, written straight from the mapping) and written before the next
// one is touched.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "checkpoint/deepspeed_tag.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/safetensors_writer.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

void append_tensor(WritableFile& file, const at::Tensor& t) {
  file.append(static_cast<const char*>(t.data_ptr()),
              static_cast<size_t>(t.numel()) * t.element_size());
}

enum class OutputFormat { kSafetensors, kTorch };

// The output's format follows its extension, as users name files for the tools that read them.
OutputFormat output_format(const std::string& path) {
  if (path.ends_with(".safetensors")) return OutputFormat::kSafetensors;
  if (path.ends_with(".pt") || path.ends_with(".pth") || path.ends_with(".bin")) return OutputFormat::kTorch;
  throw CheckpointError(::deepspeed::detail::str_cat(
      "output ", path, ": name it *.safetensors (safetensors) or *.pt, *.pth, *.bin (torch.save's format); the "
      "format follows the extension"));
}

// The model file's buffers (module/<name> for each of buffer_names), or none when the tag has no model file.
std::vector<std::pair<std::string, at::Tensor>> saved_buffers(const std::string& dir, const std::string& tag,
                                                              const PartitionIndex& index,
                                                              const std::optional<ForeignTag>& translated,
                                                              FileSystem* fs) {
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  const bool foreign = translated.has_value();
  const std::string model_file = foreign ? translated->model_file : model_states_path(dir, tag);
  if (!foreign && !fs->file_exists(model_file)) return buffers;
  StateDict model = foreign ? translated->model : load_state(model_file, LoadOptions{/*mmap=*/true});
  if (!model.contains(kBufferNamesKey)) return buffers;
  for (const c10::IValue& n : model.at(kBufferNamesKey).toList()) {
    std::string key = std::string(kModuleKey) + "/" + n.toStringRef();
    std::optional<c10::IValue> t = find_entry(model, key);
    DS_CHECK_T(CheckpointError, t && t->isTensor(), "checkpoint file ", model_file, " lists buffer '",
               n.toStringRef(), "' but has no tensor '", key, "'");
    DS_CHECK_T(CheckpointError, index.find(n.toStringRef()) == nullptr, "checkpoint file ", model_file, ": buffer '",
               n.toStringRef(), "' is also a partitioned parameter");
    buffers.emplace_back(n.toStringRef(), t->toTensor());
  }
  return buffers;
}

// One parameter whole: the mapping itself when one fragment holds it, else assembled.
at::Tensor assemble(const SavedParam& p) {
  for (const SavedFragment& f : p.fragments)
    verify_tensor(f.source, ::deepspeed::detail::str_cat(kFp32FlatGroupsKey, "/", f.group));
  if (p.fragments.size() == 1) return p.fragments[0].source.contiguous();
  at::Tensor full = at::empty({p.numel}, at::kFloat);
  for (const SavedFragment& f : p.fragments) full.narrow(0, f.begin, f.end - f.begin).copy_(f.source);
  return full;
}

}  // namespace

ConsolidateStats consolidate_fp32(const std::string& dir, const std::string& tag_in,
                                  const std::string& out_path, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const OutputFormat format = output_format(out_path);
  std::string tag =
      resolve_tag(dir, tag_in.empty() ? std::nullopt : std::optional<std::string>(tag_in), fs);
  // Python DeepSpeed's tags are translated into the same partition contract (deepspeed_tag.h).
  std::optional<ForeignTag> translated;
  PartitionIndex index = load_any_partition_index(dir, tag, fs, &translated);
  const std::vector<SavedParam>& params = index.params;
  const std::string& run_id = index.run_id;

  const std::vector<std::pair<std::string, at::Tensor>> buffers = saved_buffers(dir, tag, index, translated, fs);

  ConsolidateStats stats;
  stats.ranks = static_cast<int>(index.files.size());
  auto count = [&stats](int64_t bytes) {
    stats.tensors++;
    stats.bytes += bytes;
    stats.largest_tensor_bytes = std::max(stats.largest_tensor_bytes, bytes);
  };
  size_t slash = out_path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) fs->create_dirs(out_path.substr(0, slash));

  if (format == OutputFormat::kTorch) {
    // torch.save's format (what zero_to_fp32.py writes without --safe_serialization): a dict of name -> tensor in
    // parameter order, then the buffers. Parameters one fragment holds are written from the mapping; only those
    // straddling partitions are assembled, all before the archive is written.
    c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
    for (const SavedParam& p : params) {
      state.insert(p.name, assemble(p).view(p.shape));
      count(p.numel * 4);
    }
    for (const auto& b : buffers) {
      at::Tensor t = b.second.contiguous();
      state.insert(b.first, t);
      count(t.numel() * t.element_size());
    }
    write_file_atomic(
        out_path,
        [&](WritableFile& file) {
          write_torch_archive(state, [&file](const char* data, size_t size) { file.append(data, size); });
        },
        fs);
    return stats;
  }

  std::vector<SafetensorsEntry> entries;
  for (const SavedParam& p : params) entries.push_back({p.name, at::kFloat, p.shape});
  for (const auto& b : buffers)
    entries.push_back({b.first, b.second.scalar_type(), b.second.sizes().vec()});
  std::string header =
      safetensors_header(entries, {{"format", "pt"}, {"ds_tag", tag}, {"ds_run_id", run_id}});
  write_file_atomic(
      out_path,
      [&](WritableFile& file) {
        file.append(header.data(), header.size());
        for (const SavedParam& p : params) {
          append_tensor(file, assemble(p));
          count(p.numel * 4);
        }
        for (const auto& b : buffers) {
          at::Tensor t = b.second.contiguous();
          append_tensor(file, t);
          count(t.numel() * t.element_size());
        }
      },
      fs);
  return stats;
}

void for_each_fp32_parameter(const std::string& dir, const std::string& tag_in,
                             const std::function<void(const std::string&, const std::vector<int64_t>&,
                                                      const std::function<at::Tensor()>&)>& visit,
                             FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string tag = resolve_tag(dir, tag_in.empty() ? std::nullopt : std::optional<std::string>(tag_in), fs);
  std::optional<ForeignTag> translated;
  const PartitionIndex index = load_any_partition_index(dir, tag, fs, &translated);
  for (const SavedParam& p : index.params) visit(p.name, p.shape, [&p] { return assemble(p).view(p.shape); });
}

}  // namespace deepspeed::checkpoint

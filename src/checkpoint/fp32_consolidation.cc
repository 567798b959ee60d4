// consolidate_fp32: every rank's fp32 partitions of a tag merged into one safetensors file (the
// engine's side of the contract is in include/deepspeed/checkpoint.h). Rank files are mapped, so
// reading the metadata of all ranks costs their pickles only; each parameter is then assembled (or,
// when one fragment holds it all, written straight from the mapping) and written before the next
// one is touched.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

struct Fragment {
  int rank;
  at::Tensor source;  // 1-D fp32 view into the rank's flat group: the fragment's elements
  int64_t begin;
  int64_t end;
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::vector<Fragment> fragments;
};

int64_t get_int(const c10::impl::GenericDict& d, const char* key, const std::string& where) {
  auto it = d.find(std::string(key));
  DS_CHECK_T(CheckpointError, it != d.end() && it->value().isInt(), where, ": no int '", key, "'");
  return it->value().toInt();
}

c10::IValue get(const StateDict& state, const char* key, const std::string& file) {
  auto it = state.find(key);
  DS_CHECK_T(CheckpointError, it != state.end(), "checkpoint file ", file, " has no '", key,
             "' (not written for fp32 consolidation; see the contract in deepspeed/checkpoint.h)");
  return it->value();
}

std::vector<at::Tensor> flat_groups(const StateDict& state, const std::string& file) {
  c10::IValue v = get(state, kFp32FlatGroupsKey, file);
  DS_CHECK_T(CheckpointError, v.isList(), "checkpoint file ", file, ": '", kFp32FlatGroupsKey,
             "' is not a list");
  std::vector<at::Tensor> groups;
  for (const c10::IValue& t : v.toList()) {
    DS_CHECK_T(CheckpointError,
               t.isTensor() && t.toTensor().dim() == 1 && t.toTensor().scalar_type() == at::kFloat,
               "checkpoint file ", file, ": '", kFp32FlatGroupsKey, "'[", groups.size(),
               "] is not a 1-D float32 tensor");
    groups.push_back(t.toTensor());
  }
  return groups;
}

// Adds rank `rank`'s fragments to `params` (in order of first appearance).
void collect_fragments(const StateDict& state, int rank, const std::string& file,
                       std::vector<Param>& params, std::map<std::string, size_t>& index) {
  std::vector<at::Tensor> groups = flat_groups(state, file);
  c10::IValue slices = get(state, kParamSlicesKey, file);
  DS_CHECK_T(CheckpointError, slices.isList() && slices.toList().size() == groups.size(),
             "checkpoint file ", file, ": '", kParamSlicesKey,
             "' must be a list with one entry per fp32 group (", groups.size(), ")");
  c10::impl::GenericList per_group = slices.toList();
  for (size_t g = 0; g < groups.size(); ++g) {
    c10::IValue group_slices = per_group.get(g);
    DS_CHECK_T(CheckpointError, group_slices.isList(), "checkpoint file ", file, ": ",
               kParamSlicesKey, "[", g, "] is not a list");
    for (const c10::IValue& s : group_slices.toList()) {
      std::string where =
          "checkpoint file " + file + ": " + kParamSlicesKey + "[" + std::to_string(g) + "]";
      DS_CHECK_T(CheckpointError, s.isGenericDict(), where, " holds a ", s.tagKind(),
                 ", not a dict");
      c10::impl::GenericDict d = s.toGenericDict();
      auto name_it = d.find(std::string("name"));
      DS_CHECK_T(CheckpointError, name_it != d.end() && name_it->value().isString(), where,
                 ": a slice has no name");
      std::string name = name_it->value().toStringRef();
      where += " '" + name + "'";
      auto shape_it = d.find(std::string("shape"));
      DS_CHECK_T(CheckpointError, shape_it != d.end() && shape_it->value().isList(), where,
                 ": no 'shape' list");
      std::vector<int64_t> shape;
      int64_t numel = 1;
      for (const c10::IValue& x : shape_it->value().toList()) {
        DS_CHECK_T(CheckpointError, x.isInt() && x.toInt() >= 0, where,
                   ": shape holds a non-integer");
        shape.push_back(x.toInt());
        numel *= x.toInt();
      }
      int64_t begin = get_int(d, "begin", where), end = get_int(d, "end", where);
      int64_t offset = get_int(d, "offset", where);
      DS_CHECK_T(CheckpointError, 0 <= begin && begin <= end && end <= numel, where, ": [", begin,
                 ", ", end, ") is outside the parameter's ", numel, " elements");
      DS_CHECK_T(CheckpointError, offset >= 0 && offset + (end - begin) <= groups[g].numel(), where,
                 ": offset ", offset, " + ", end - begin, " elements overruns the partition of ",
                 groups[g].numel());
      auto [it, inserted] = index.emplace(name, params.size());
      if (inserted) params.push_back(Param{name, shape, numel, {}});
      Param& p = params[it->second];
      DS_CHECK_T(CheckpointError, p.shape == shape, where,
                 ": shape differs from the one in another fragment");
      if (end > begin)
        p.fragments.push_back(Fragment{rank, groups[g].narrow(0, offset, end - begin), begin, end});
    }
  }
}

// Each element of the parameter must come from exactly one fragment.
void check_coverage(Param& p) {
  std::sort(p.fragments.begin(), p.fragments.end(),
            [](const Fragment& a, const Fragment& b) { return a.begin < b.begin; });
  int64_t covered = 0;
  for (const Fragment& f : p.fragments) {
    DS_CHECK_T(CheckpointError, f.begin == covered, "parameter '", p.name, "': elements [",
               std::min(covered, f.begin), ", ", std::max(covered, f.begin), ") are ",
               f.begin > covered ? "in no rank's partition" : "held twice", " (fragment of rank ",
               f.rank, " starts at ", f.begin, ")");
    covered = f.end;
  }
  DS_CHECK_T(CheckpointError, covered == p.numel, "parameter '", p.name, "': elements [", covered,
             ", ", p.numel, ") are in no rank's partition");
}

void append_tensor(WritableFile& file, const at::Tensor& t) {
  file.append(static_cast<const char*>(t.data_ptr()),
              static_cast<size_t>(t.numel()) * t.element_size());
}

}  // namespace

ConsolidateStats consolidate_fp32(const std::string& dir, const std::string& tag_in,
                                  const std::string& out_path, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  std::string tag =
      resolve_tag(dir, tag_in.empty() ? std::nullopt : std::optional<std::string>(tag_in), fs);
  std::vector<std::string> files = list_optim_states_files(dir, tag, 0, fs);
  std::vector<Param> params;
  std::map<std::string, size_t> index;
  std::string run_id;
  for (size_t r = 0; r < files.size(); ++r) {
    StateDict state = load_state(files[r], LoadOptions{/*mmap=*/true});
    check_metadata(state, files[r], run_id);
    if (r == 0) run_id = state.at(kRunIdKey).toStringRef();
    c10::IValue count = get(state, kPartitionCountKey, files[r]);
    DS_CHECK_T(CheckpointError,
               count.isInt() && count.toInt() == static_cast<int64_t>(files.size()),
               "checkpoint file ", files[r], ": ", kPartitionCountKey, " is ", count, " but ", dir,
               "/", tag, " holds ", files.size(), " optimizer state files");
    c10::IValue rank = get(state, kDpRankKey, files[r]);
    DS_CHECK_T(CheckpointError, rank.isInt() && rank.toInt() == static_cast<int64_t>(r),
               "checkpoint file ", files[r], ": ", kDpRankKey, " is ", rank, ", expected ", r);
    collect_fragments(state, static_cast<int>(r), files[r], params, index);
  }
  for (Param& p : params) check_coverage(p);

  std::vector<std::pair<std::string, at::Tensor>> buffers;
  std::string model_file = model_states_path(dir, tag);
  if (fs->file_exists(model_file)) {
    StateDict model = load_state(model_file, LoadOptions{/*mmap=*/true});
    if (model.contains(kBufferNamesKey)) {
      for (const c10::IValue& n : model.at(kBufferNamesKey).toList()) {
        std::string key = std::string(kModuleKey) + "/" + n.toStringRef();
        std::optional<c10::IValue> t = find_entry(model, key);
        DS_CHECK_T(CheckpointError, t && t->isTensor(), "checkpoint file ", model_file,
                   " lists buffer '", n.toStringRef(), "' but has no tensor '", key, "'");
        DS_CHECK_T(CheckpointError, !index.count(n.toStringRef()), "checkpoint file ", model_file,
                   ": buffer '", n.toStringRef(), "' is also a partitioned parameter");
        buffers.emplace_back(n.toStringRef(), t->toTensor());
      }
    }
  }

  std::vector<SafetensorsEntry> entries;
  for (const Param& p : params) entries.push_back({p.name, at::kFloat, p.shape});
  for (const auto& b : buffers)
    entries.push_back({b.first, b.second.scalar_type(), b.second.sizes().vec()});
  std::string header =
      safetensors_header(entries, {{"format", "pt"}, {"ds_tag", tag}, {"ds_run_id", run_id}});

  ConsolidateStats stats;
  stats.ranks = static_cast<int>(files.size());
  size_t slash = out_path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) fs->create_dirs(out_path.substr(0, slash));
  write_file_atomic(
      out_path,
      [&](WritableFile& file) {
        file.append(header.data(), header.size());
        for (const Param& p : params) {
          int64_t bytes = p.numel * 4;
          if (p.fragments.size() == 1) {
            append_tensor(file, p.fragments[0].source.contiguous());
          } else {
            at::Tensor full = at::empty({p.numel}, at::kFloat);
            for (const Fragment& f : p.fragments)
              full.narrow(0, f.begin, f.end - f.begin).copy_(f.source);
            append_tensor(file, full);
          }
          stats.tensors++;
          stats.bytes += bytes;
          stats.largest_tensor_bytes = std::max(stats.largest_tensor_bytes, bytes);
        }
        for (const auto& b : buffers) {
          at::Tensor t = b.second.contiguous();
          append_tensor(file, t);
          int64_t bytes = t.numel() * t.element_size();
          stats.tensors++;
          stats.bytes += bytes;
          stats.largest_tensor_bytes = std::max(stats.largest_tensor_bytes, bytes);
        }
      },
      fs);
  return stats;
}

}  // namespace deepspeed::checkpoint

// Loading and indexing a tag's fp32 partitions (partition_index.h).
#include "checkpoint/partition_index.h"

#include <algorithm>

namespace deepspeed::checkpoint {
namespace {

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
  return flat_tensor_list(state, kFp32FlatGroupsKey, file);
}

// Adds rank `rank`'s fragments to `params` (in order of first appearance).
void collect_fragments(const StateDict& state, int rank, const std::string& file,
                       std::vector<SavedParam>& params, std::map<std::string, size_t>& index) {
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
      if (inserted) params.push_back(SavedParam{name, shape, numel, {}});
      SavedParam& p = params[it->second];
      DS_CHECK_T(CheckpointError, p.shape == shape, where,
                 ": shape differs from the one in another fragment");
      if (end > begin)
        p.fragments.push_back(
            SavedFragment{rank, g, begin, end, offset, groups[g].narrow(0, offset, end - begin)});
    }
  }
}

// Each element of the parameter must come from exactly one fragment.
void check_coverage(SavedParam& p) {
  std::sort(p.fragments.begin(), p.fragments.end(),
            [](const SavedFragment& a, const SavedFragment& b) { return a.begin < b.begin; });
  int64_t covered = 0;
  for (const SavedFragment& f : p.fragments) {
    DS_CHECK_T(CheckpointError, f.begin == covered, "parameter '", p.name, "': elements [",
               std::min(covered, f.begin), ", ", std::max(covered, f.begin), ") are ",
               f.begin > covered ? "in no rank's partition" : "held twice", " (fragment of rank ",
               f.rank, " starts at ", f.begin, ")");
    covered = f.end;
  }
  DS_CHECK_T(CheckpointError, covered == p.numel, "parameter '", p.name, "': elements [", covered,
             ", ", p.numel, ") are in no rank's partition");
}

}  // namespace

std::vector<at::Tensor> flat_tensor_list(const StateDict& state, const char* key,
                                         const std::string& file) {
  c10::IValue v = get(state, key, file);
  DS_CHECK_T(CheckpointError, v.isList(), "checkpoint file ", file, ": '", key, "' is not a list");
  std::vector<at::Tensor> out;
  for (const c10::IValue& t : v.toList()) {
    DS_CHECK_T(CheckpointError,
               t.isTensor() && t.toTensor().dim() == 1 && t.toTensor().scalar_type() == at::kFloat,
               "checkpoint file ", file, ": '", key, "'[", out.size(),
               "] is not a 1-D float32 tensor");
    out.push_back(t.toTensor());
  }
  return out;
}

const SavedParam* PartitionIndex::find(const std::string& name) const {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &params[it->second];
}

PartitionIndex load_partition_index(const std::string& dir, const std::string& tag,
                                    FileSystem* fs, int mp_rank) {
  if (fs == nullptr) fs = default_file_system();
  PartitionIndex index;
  index.tag = tag;
  index.files = list_optim_states_files(dir, tag, mp_rank, fs);
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    // Checksums per record as callers copy from them (verify_tensor): each rank reads a few.
    StateDict state =
        load_state(file, LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
    check_metadata(state, file, index.run_id);
    if (r == 0) index.run_id = state.at(kRunIdKey).toStringRef();
    c10::IValue count = get(state, kPartitionCountKey, file);
    DS_CHECK_T(CheckpointError,
               count.isInt() && count.toInt() == static_cast<int64_t>(index.files.size()),
               "checkpoint file ", file, ": ", kPartitionCountKey, " is ", count, " but ", dir, "/",
               tag, " holds ", index.files.size(), " optimizer state files");
    c10::IValue rank = get(state, kDpRankKey, file);
    DS_CHECK_T(CheckpointError, rank.isInt() && rank.toInt() == static_cast<int64_t>(r),
               "checkpoint file ", file, ": ", kDpRankKey, " is ", rank, ", expected ", r);
    collect_fragments(state, static_cast<int>(r), file, index.params, index.by_name);
    index.states.push_back(std::move(state));
  }
  for (SavedParam& p : index.params) check_coverage(p);
  return index;
}

}  // namespace deepspeed::checkpoint

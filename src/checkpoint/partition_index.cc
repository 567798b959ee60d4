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

c10::impl::GenericDict param_slice_entry(const std::string& name, const std::vector<int64_t>& shape,
                                         int64_t begin, int64_t end, int64_t offset) {
  c10::impl::GenericDict d = make_any_dict();
  d.insert(std::string("name"), name);
  d.insert(std::string("shape"), c10::List<int64_t>(shape));
  d.insert(std::string("begin"), begin);
  d.insert(std::string("end"), end);
  d.insert(std::string("offset"), offset);
  return d;
}

StateDict partition_rank_file(int64_t rank, int64_t count, const std::vector<at::Tensor>& flat_groups,
                              const c10::impl::GenericList& slices, const c10::IValue& optimizer) {
  StateDict s = make_state_dict();
  s.insert(kPartitionCountKey, count);
  s.insert(kDpRankKey, rank);
  c10::List<at::Tensor> groups;
  for (const at::Tensor& t : flat_groups) groups.push_back(t);
  s.insert(kFp32FlatGroupsKey, groups);
  s.insert(kParamSlicesKey, slices);
  s.insert("optimizer_state_dict", optimizer);
  return s;
}

const SavedParam* PartitionIndex::find(const std::string& name) const {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &params[it->second];
}

PartitionIndex index_partitions(const std::string& tag, std::vector<std::string> files,
                                std::vector<StateDict> states) {
  DS_CHECK_T(CheckpointError, files.size() == states.size() && !files.empty(), "checkpoint tag ", tag,
             ": no rank files to index");
  PartitionIndex index;
  index.tag = tag;
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string& file = files[r];
    c10::IValue count = get(states[r], kPartitionCountKey, file);
    DS_CHECK_T(CheckpointError,
               count.isInt() && count.toInt() == static_cast<int64_t>(files.size()),
               "checkpoint file ", file, ": ", kPartitionCountKey, " is ", count, " but tag ", tag,
               " holds ", files.size(), " optimizer state files");
    c10::IValue rank = get(states[r], kDpRankKey, file);
    DS_CHECK_T(CheckpointError, rank.isInt() && rank.toInt() == static_cast<int64_t>(r),
               "checkpoint file ", file, ": ", kDpRankKey, " is ", rank, ", expected ", r);
    collect_fragments(states[r], static_cast<int>(r), file, index.params, index.by_name);
  }
  for (SavedParam& p : index.params) check_coverage(p);
  index.files = std::move(files);
  index.states = std::move(states);
  return index;
}

PartitionIndex load_partition_index(const std::string& dir, const std::string& tag,
                                    FileSystem* fs, int mp_rank) {
  if (fs == nullptr) fs = default_file_system();
  std::vector<std::string> files = list_optim_states_files(dir, tag, mp_rank, fs);
  std::vector<StateDict> states;
  std::string run_id;
  for (size_t r = 0; r < files.size(); ++r) {
    // Checksums per record as callers copy from them (verify_tensor): each rank reads a few.
    StateDict state =
        load_state(files[r], LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
    check_metadata(state, files[r], run_id);
    if (r == 0) run_id = state.at(kRunIdKey).toStringRef();
    states.push_back(std::move(state));
  }
  PartitionIndex index = index_partitions(tag, std::move(files), std::move(states));
  index.run_id = run_id;
  return index;
}

std::vector<RankOptimizerStates> rank_optimizer_states(const PartitionIndex& index) {
  std::vector<RankOptimizerStates> out;
  for (size_t r = 0; r < index.states.size(); ++r) {
    const std::string& file = index.files[r];
    RankOptimizerStates o;
    auto it = index.states[r].find("optimizer_state_dict");
    if (it != index.states[r].end() && it->value().isGenericDict()) {  // else saved without an optimizer
      const c10::impl::GenericDict opt = it->value().toGenericDict();
      auto names = opt.find(std::string("state_names"));
      auto states = opt.find(std::string("state"));
      if (names != opt.end() && states != opt.end()) {
        for (const c10::IValue& n : names->value().toList()) o.names.push_back(n.toStringRef());
        for (const c10::IValue& g : states->value().toList()) {
          o.groups.emplace_back();
          for (const std::string& n : o.names) {
            auto t = g.toGenericDict().find(n);
            DS_CHECK_T(CheckpointError, t != g.toGenericDict().end() && t->value().isTensor(), "checkpoint file ",
                       file, ": optimizer state '", n, "' is missing in a group");
            o.groups.back().push_back(t->value().toTensor());
          }
        }
      }
    }
    DS_CHECK_T(CheckpointError, r == 0 || o.names == out[0].names, "checkpoint file ", file,
               " holds other optimizer states than rank 0's");
    out.push_back(std::move(o));
  }
  return out;
}

void copy_param_elements(const PartitionIndex& index, const std::vector<RankOptimizerStates>& optimizers,
                         const SavedParam& p, int64_t begin, int64_t end, const at::Tensor& fp32,
                         const std::vector<at::Tensor>& states) {
  for (const SavedFragment& f : p.fragments) {
    const int64_t lo = std::max(begin, f.begin), hi = std::min(end, f.end);
    if (lo >= hi) continue;
    verify_tensor(f.source, p.name);
    fp32.narrow(0, lo - begin, hi - lo).copy_(f.source.narrow(0, lo - f.begin, hi - lo));
    const RankOptimizerStates& o = optimizers.at(static_cast<size_t>(f.rank));
    DS_CHECK_T(CheckpointError, states.size() <= o.names.size(), "checkpoint file ",
               index.files[static_cast<size_t>(f.rank)], " holds ", o.names.size(), " optimizer states, ",
               states.size(), " wanted");
    for (size_t k = 0; k < states.size(); ++k) {
      const at::Tensor src = o.groups.at(f.group).at(k).narrow(0, f.offset + (lo - f.begin), hi - lo);
      verify_tensor(src, p.name + " " + o.names[k]);
      states[k].narrow(0, lo - begin, hi - lo).copy_(src);
    }
  }
}

}  // namespace deepspeed::checkpoint

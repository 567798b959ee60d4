// Loading a checkpoint, as a plan: plan_load recognises the tag's format (ours, Python DeepSpeed's, universal),
// reads it, checks everything this rank will use and says what goes where; the engine applies the plan only after
// every rank's plan was made (runtime::all_ranks_or_none), so a bad file fails every rank before anything changes.
//
// What goes where:
//   masters and optimizer states  the copy runs: each saved fp32 fragment overlapping a fragment of this rank's
//                                 masters, matched by parameter name, so world size, ZeRO stage, padding and
//                                 parameter groups may differ between save and load (copy_masters)
//   buffers                       the module's, saved whole in the model file
//   optimizer                     step count, each group's lr and momentum (group_hyperparameters), a client
//                                 optimizer's archive
//   counters and RNG              global steps and samples, the batch they were saved at, this rank's RNG state
//   sections                      the model file's dicts that other components own (the loss scaler, the schedule,
//                                 ZenFlow's selection): returned checked for corruption, parsed by their owners
//   client state                  what save_checkpoint was given
// Every CRC-32 a rank reads from is checked, and each rank checks a share of the records no rank reads, so a flipped
// byte anywhere fails the load on some rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/deepspeed_tag.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/universal.h"
#include "deepspeed/checkpoint.h"
#include "zero/partition.h"

namespace deepspeed::checkpoint {

// What the loading engine holds and asks for.
struct LoadTarget {
  std::string dir;
  std::optional<std::string> tag;  // default: the one `latest` (latest_universal) names
  bool universal = false;          // checkpoint.load_universal
  CheckpointNameMap name_map;
  int mp_rank = 0;  // whose files (a pipeline stage's)
  int rank = 0;     // in the data-parallel world, which loads alike
  int world_size = 1;
  bool refuse_python_tags = false;  // an engine with MoE experts cannot take Python DeepSpeed's expert files
  // Universal tags: this rank's slice of each whole parameter (tensor parallelism); empty keeps them whole.
  ParamSlicer slicer;
  int64_t tensor_parallel_size = 1;   // compared with the file's mp_world_size
  bool tensor_size_checked = false;   // a 3D pipeline compared its own record already
  // This rank's master fragments, every parameter's name and shape by (group, index), and names of the model's
  // parameters that other ranks hold (MoE experts).
  std::vector<zero::MasterFragment> fragments;
  std::vector<std::vector<std::string>> names;
  std::vector<std::vector<std::vector<int64_t>>> shapes;
  std::vector<std::string> other_ranks_names;
  bool may_hold_more = false;  // a universal tag read by one stage of a model: the others' parameters are fine
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // the module's, by name
  bool full = true;  // false: the module only (no optimizer, counters, RNG, sections, client state)
  struct Optimizer {
    std::string name;
    std::vector<std::string> state_names;
    bool needs_archive = false;  // a client optimizer: its archive must be in the file
  };
  std::optional<Optimizer> optimizer;  // its states are loaded when set
  std::vector<std::string> sections;   // model-file keys whose dicts to return when present
  int64_t train_batch_size = 0;
};

// The optimizer part of every saved rank file.
struct SavedOptimizer {
  std::string type;
  int64_t step = 0;
  std::vector<std::string> state_names;
  std::vector<std::vector<std::vector<at::Tensor>>> states;  // [rank][k][group], 1-D fp32
  std::vector<double> lrs;                                   // rank 0's param_groups
  std::vector<std::optional<double>> momenta;
  at::Tensor archive;  // a client optimizer's bytes
  // lr and momentum for each of this engine's `groups`: group by group when the counts agree, else the one value
  // all saved groups share (Python DeepSpeed's single group, a universal tag's group per parameter); nullopt when
  // neither (the schedule then sets them).
  std::optional<std::vector<std::pair<double, std::optional<double>>>> group_hyperparameters(size_t groups) const;
};

// n elements of a saved flat group that belong at `offset` of this rank's master `group`.
struct CopyRun {
  size_t group = 0;
  int64_t offset = 0;
  const SavedFragment* saved = nullptr;  // into LoadPlan::index
  int64_t source_index = 0;              // in saved->source
  int64_t saved_offset = 0;              // in the saved rank's flat group
  int64_t n = 0;
};

struct LoadPlan {
  LoadPlan() = default;
  LoadPlan(LoadPlan&&) = default;
  LoadPlan& operator=(LoadPlan&&) = default;
  LoadPlan(const LoadPlan&) = delete;  // runs point into index

  std::string path;        // <dir>/<tag>
  std::string model_file;  // the file the model's entries came from
  StateDict model = make_state_dict();
  PartitionIndex index;
  std::vector<CopyRun> runs;
  std::vector<std::pair<at::Tensor, at::Tensor>> buffers;  // (this module's, saved)
  std::optional<SavedOptimizer> optimizer;
  std::map<std::string, c10::impl::GenericDict> sections;  // those of LoadTarget::sections the file has
  int64_t global_steps = 0;
  int64_t global_samples = 0;  // as saved, or (a file without them) the steps at this run's batch, as DeepSpeed does
  int64_t saved_batch = 0;     // the global batch it was saved at (this run's when the file does not say)
  std::optional<int64_t> micro_steps;
  at::Tensor rng;  // this rank's RNG state (undefined: none saved for it)
  std::optional<StateDict> client_state;
};

// True (and a warning on rank 0) when no tag was given and no `latest` names one: there is nothing to load.
bool nothing_to_load(const LoadTarget& target, FileSystem* fs = nullptr);

// Reads and checks everything `target` will take from the tag. Throws CheckpointError naming the file and the
// field (every parameter mismatch in one line); leaves nothing changed.
LoadPlan plan_load(const LoadTarget& target, FileSystem* fs = nullptr);

// Copies the plan's runs into this rank's fp32 `masters` (per group) and, when the plan has the optimizer, into
// `states` ([group][k]).
void copy_masters(const LoadPlan& plan, const std::vector<at::Tensor>& masters,
                  const std::vector<std::vector<at::Tensor>>& states);

// `key` of a saved dict, or CheckpointError naming `where` and the key.
c10::IValue saved_entry(const c10::impl::GenericDict& d, const char* key, const std::string& where);

}  // namespace deepspeed::checkpoint

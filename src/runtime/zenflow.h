// ZenFlow (DeepSpeed's `zero_optimization.zenflow`), ZeRO stages 1-3 with optimizer offload to CPU: after
// `full_warm_up_rounds` iterations in which every parameter takes the CPU optimizer's step, each 2-D weight's top-k
// most important input columns (by the sum of |gradient| over the column, on the rank-averaged gradient of a
// selection iteration) and every 1-D parameter are trained at every iteration by a selective AdamW here, on the
// training device, while the other columns take the CPU optimizer's step every `update_interval` iterations on the
// gradient accumulated over them (in the background when overlapped: one window stale).
//
// update_interval "auto" (DeepSpeed's default) makes the window adaptive: each iteration weighs, per 2-D weight, the
// gradient mass of its unselected columns (added up over the window) against the selected columns' mass (averaged
// over the window), each divided by its share of the columns; once `auto_ratio` of the weights have caught up, the
// next iteration ends the window. The CPU step then takes the window's mean gradient.
//
// What differs from DeepSpeed's Python (stated in docs/architecture.md): the selected values are kept in fp32 here
// (DeepSpeed updates them in the model's dtype), and at a new selection the masters of the previously selected
// columns take those fp32 values instead of being re-read from the 16-bit parameters.
//
// Not thread-safe: the engine calls it from its training thread only (the overlapped CPU step never touches it).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/config/zero_config.h"
#include "zero/partition.h"
#include "zero/stage.h"
#include "zero/stage_features.h"

namespace deepspeed::runtime {

constexpr const char* kZenFlowSection = "zenflow";  // the model file's key of ZenFlow::state_dict()

// Which iterations (0-based, one per engine.step()) select columns and which end an update window.
struct ZenFlowSchedule {
  int64_t warmup = 0;           // full_warm_up_rounds
  int64_t update_interval = 1;  // iterations per CPU step after the warm-up
  int64_t select_interval = 0;  // iterations between selections; 0: once, when the warm-up ends
  bool adaptive = false;        // update_interval "auto": ZenFlow::ends_window decides at run time

  static ZenFlowSchedule from_config(const config::ZenFlowConfig& c);
  // Iterations past the warm-up run the selective update.
  bool selective(int64_t iteration) const { return iteration >= warmup; }
  bool selects(int64_t iteration) const;
  // The CPU optimizer steps at the end of this iteration (every warm-up iteration is a window of its own). Adaptive:
  // only the windows the schedule alone ends (warm-up, the iteration before a selection).
  bool ends_window(int64_t iteration) const;
};

// The selective optimizer's hyperparameters: the config's Adam/AdamW ones, per parameter group for the decay.
struct ZenFlowAdam {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool adamw = true;  // decoupled weight decay (else L2 added to the gradient, as the config's Adam in that mode)
  std::vector<double> weight_decay;  // per group
};

// ZenFlow over ZeRO stage 3, whose parameters are partitioned: the stage whose model-dtype partitions take the
// selected values, and the whole shapes (stage.param_shapes()).
struct ZenFlowPartitioned {
  zero::Stage* stage = nullptr;
  zero::PartitionWrites* writes = nullptr;  // the stage's (stage_features.h)
  std::vector<std::vector<std::vector<int64_t>>> shapes;
};

class ZenFlow {
 public:
  // `groups[g]` are the trainable parameters of group g; `names` name them for errors (same shape as groups).
  // With `partitioned.stage` (stage 3) the parameters are whole only while their unit is gathered: a selection
  // iteration averages each weight's gradient as its hook sees it (one all-reduce per parameter, nothing whole kept),
  // selected values are read from the stage's masters and written into its partitions.
  ZenFlow(const config::ZenFlowConfig& config, std::vector<std::vector<at::Tensor>> groups,
          const std::vector<std::vector<std::string>>& names, ZenFlowAdam adam, comm::ProcessGroup group,
          ZenFlowPartitioned partitioned = {});
  ~ZenFlow();
  ZenFlow(const ZenFlow&) = delete;
  ZenFlow& operator=(const ZenFlow&) = delete;

  const ZenFlowSchedule& schedule() const { return schedule_; }
  bool has_selection() const { return selected_; }

  // Update windows. Iterations run in order; ends_window(i) holds from iteration i's backward on.
  bool ends_window(int64_t iteration) const;
  // The next iteration starts a window (a checkpoint may be saved before it).
  bool starts_window(int64_t iteration) const;
  // What the CPU step divides the gradients accumulated over the window ending at `iteration` by: the window's
  // length when adaptive (the backward does not know it in advance), else 1 (the loss was divided by
  // update_interval, DeepSpeed's gradient_accumulation_steps).
  int64_t step_gradient_divisor(int64_t iteration) const;
  // After iteration `iteration`'s step: adaptive windows weigh its gradients and decide whether the next iteration
  // ends the window. The same answer on every rank (it reads only reduced values).
  void end_iteration(int64_t iteration);
  // A resume at `iteration` (a window start): the adaptive window starts there, and nothing of an iteration in
  // progress (captured gradients, a pending choice) survives.
  void resume_at(int64_t iteration);

  // Before iteration `iteration`'s backward: arms the gradient hooks (whole gradients when it selects, else the
  // selected columns only).
  void begin_backward(int64_t iteration);
  // Forgets the selection and the selective optimizer's state (a checkpoint without them was loaded).
  void reset();
  // After the backward of a selective iteration: the captured gradients averaged over the data-parallel group.
  // Collective (at stage 3's selection iterations the hooks made the collectives and this makes none).
  void reduce_gradients();
  // A selection iteration, after reduce_gradients(): the top-k columns of each weight by the averaged gradient, the
  // fp32 selected values from the parameters (stage 3: from the masters, rounded to the model dtype; collective),
  // the selective moments cleared (their step counts go on).
  void select();
  // The fp32 selected values into the parameters (after anything wrote the masters over them). Stage 3: into the
  // partitions, then the persistent unit is gathered again (collective).
  void write_selected_into_parameters() const;
  // The fp32 selected values into the stage's masters where this rank holds them (before a new selection, so the
  // CPU optimizer goes on from where the selective one left those columns).
  void write_selected_into_masters(const std::vector<at::Tensor>& masters,
                                   const std::vector<zero::MasterFragment>& fragments) const;
  // One selective AdamW step of the selected values at each group's `lrs[g]`, written into the parameters.
  void step(const std::vector<double>& lrs);

  // Checkpoints (the same on every rank): the selection, the fp32 selected values, their moments and step counts,
  // one entry per parameter in group order.
  c10::impl::GenericDict state_dict() const;
  // Restores state_dict()'s contents (only checks them when !apply); a state that does not fit this model is a
  // CheckpointError naming `where` and the parameter. Nothing is changed unless all of it fits.
  void load_state_dict(const c10::impl::GenericDict& state, const std::string& where,
                       const std::vector<std::vector<std::string>>& names, bool apply = true);

 private:
  struct Slot {
    size_t group = 0;
    at::Tensor param;
    std::vector<int64_t> shape;  // whole (a stage-3 parameter at rest holds nothing)
    bool matrix = false;  // 2-D: columns are selected; otherwise every element is
    bool chosen = false;  // stage 3: this selection iteration's hook chose the columns (kept aside until select())
    at::Tensor chosen_index, chosen_grad;
    int64_t hook = -1;
    at::Tensor captured;  // this iteration's local gradient (fp32): whole, or the selected columns
    at::Tensor grad;      // the averaged gradient of the selected values
    at::Tensor index;     // selected columns (int64, sorted), matrices only
    at::Tensor value, exp_avg, exp_avg_sq;  // fp32, shaped as the selection
    int64_t steps = 0;
    // Adaptive windows (matrices): this iteration's local sums of |gradient| (fp64 scalars), whole and selected
    // columns, then their rank means; and the window's running figures.
    at::Tensor local_total, local_selected;
    double total = 0.0, selected = 0.0;
    double selected_mean = 0.0;    // mean over the window of selected mass / topk_ratio
    double unselected_sum = 0.0;   // sum over the window of unselected mass / (1 - topk_ratio)
  };
  void capture(size_t slot, const at::Tensor& grad);
  // A selection: the top-k columns of `grad` (the averaged whole gradient, fp32) into chosen_index, its selected
  // part into chosen_grad, and the masses.
  void choose(Slot& s, const at::Tensor& grad);
  size_t slot_of(size_t group, size_t index) const;
  // The selected elements of `s` inside elements [begin, end) of its flattening: their offsets from `begin`, and
  // their flat indices into the selection-shaped tensors (value, grad).
  std::pair<at::Tensor, at::Tensor> picks(const Slot& s, int64_t begin, int64_t end) const;
  // Stage 3: the fp32 selected values read from the stage's masters (each rank fills what it holds; one all-reduce).
  void read_selected_from_masters();

  ZenFlowSchedule schedule_;
  double topk_ratio_;
  ZenFlowAdam adam_;
  comm::ProcessGroup group_;
  std::vector<Slot> slots_;
  bool whole_ = false;     // this iteration's hooks keep whole gradients (a selection iteration)
  bool armed_ = false;
  bool selected_ = false;  // select() has run
  ZenFlowPartitioned partitioned_;
  std::vector<zero::MasterFragment> fragments_;  // stage 3: this rank's (fixed for the run)
  // Stage 3: picks() of each of fragments_ under the current selection (the positions every iteration writes);
  // refresh_fragment_picks() needs the selection's columns set.
  std::vector<std::pair<at::Tensor, at::Tensor>> fragment_picks_;
  void refresh_fragment_picks();
  std::vector<size_t> first_slot_;               // slot of (group, 0)
  // Adaptive windows.
  double auto_ratio_ = 0.99;
  bool weighed_ = false;         // this iteration's masses are known (a selective iteration reduced them)
  int64_t window_begin_ = 0;     // first iteration of the current window
  int64_t window_weighed_ = 0;   // iterations of the window whose masses were weighed
  bool end_next_ = false;        // the next iteration ends the window
};

}  // namespace deepspeed::runtime

// deepspeed::comm — DeepSpeed's communication facade: process groups over c10d (Gloo on CPU), the
// full set of collectives ZeRO, pipeline and MoE code needs, a comms logger, and hang diagnosis.
//
// Every collective returns a waitable Work. Where the backend lacks an op or dtype (Gloo in older
// LibTorch releases had no AVG, no flat all-gather or reduce-scatter and no bfloat16 arithmetic), a
// fallback built from the ops it has runs behind the same call, so callers never branch on the
// backend. What the backend does natively is probed once per process, when the first group is
// created (backend_capabilities()). Ranks passed to collectives (src, dst) are global ranks, as in torch.distributed;
// ProcessGroup::rank() is the rank inside the group.
//
// Hang diagnosis: every collective carries a per-group sequence number. With check mode on
// (InitOptions or env DS_COMM_CHECK=1) ranks exchange each collective's fingerprint before running
// it and throw CommError naming the first divergent rank; a collective that does not complete
// within the timeout throws CommTimeoutError naming the collective it was waiting in.
//
// Thread-safety: init_distributed, new_group and destroy_process_group must be called from one
// thread, in the same order on all ranks. Collectives on one group must be issued in the same order
// on all its ranks (as with any collective library); Work::wait and the logger functions may be
// called from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct };

// "sum", "avg", "max", "min", "product".
std::string reduce_op_name(ReduceOp op);

// A handle on an issued collective. Copies share the same operation.
class Work {
 public:
  class Impl;
  Work() = default;  // an already completed no-op
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // Blocks until the collective and its completion step (fallback post-processing, copy-back) have
  // run; output tensors are valid afterwards. Throws CommTimeoutError when the collective did not
  // complete in time (or a peer was lost) and CommError when it failed; a second wait() rethrows
  // the same error.
  void wait();
  // True once wait() would return without blocking; runs the completion step when the transfer has
  // finished, so outputs are valid whenever this returns true. Throws like wait() if the collective
  // failed.
  bool is_completed();

 private:
  std::shared_ptr<Impl> impl_;
};

// A group of ranks that run collectives together: the world, or a sub-group from new_group().
// Copies share the same group. Ranks outside a sub-group get a handle whose is_member() is false;
// its collectives throw CommError.
class ProcessGroup {
 public:
  class Impl;
  ProcessGroup() = default;  // a null handle: is_member() is false
  explicit ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  bool is_member() const;
  // This process's rank inside the group, or -1 when not a member.
  int rank() const;
  // Number of ranks in the group (also known to non-members).
  int size() const;
  // The global ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const;
  // "world" or "group #<id> {r0,r1,...}", as used in error messages.
  const std::string& name() const;

  // In place: every rank's `tensor` becomes the reduction over all ranks. AVG divides the sum by
  // size().
  Work all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum, bool async_op = false);
  // In place: every rank's `tensor` becomes global rank `src`'s.
  Work broadcast(const at::Tensor& tensor, int src, bool async_op = false);
  // Global rank `dst` receives the reduction in `tensor`; other ranks' `tensor` contents are
  // unspecified after.
  Work reduce(const at::Tensor& tensor, int dst, ReduceOp op = ReduceOp::kSum,
              bool async_op = false);
  // output (numel == size() * input.numel(), same dtype) holds every rank's input in group-rank
  // order.
  Work all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input,
                              bool async_op = false);
  // outputs[i] (size() tensors shaped like input) receives group rank i's input.
  Work all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                  bool async_op = false);
  // input (numel == size() * output.numel()): output on group rank i is the reduction of chunk i of
  // all inputs.
  Work reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input,
                             ReduceOp op = ReduceOp::kSum, bool async_op = false);
  // In place, for a scratch `buffer` (numel divisible by size()): afterwards chunk i of `buffer` on group rank i
  // holds the reduction of chunk i over all ranks; the other chunks are left unspecified. Needs no temporary the
  // size of `buffer` (NCCL reduces in place; Gloo, whose flat call clones its input, runs one reduce per chunk).
  Work reduce_scatter_in_place(const at::Tensor& buffer, ReduceOp op = ReduceOp::kSum, bool async_op = false);
  // Splits input along dim 0 (input_split_sizes[i] rows to group rank i; empty = equal split) and
  // concatenates what each rank sent into output along dim 0 (output_split_sizes[i] rows from rank
  // i; empty = equal split).
  Work all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                         const std::vector<int64_t>& output_split_sizes = {},
                         const std::vector<int64_t>& input_split_sizes = {}, bool async_op = false);
  // Point-to-point with global ranks. Not part of the group's collective sequence (only the two
  // peers take part).
  Work send(const at::Tensor& tensor, int dst, int tag = 0, bool async_op = false);
  Work recv(const at::Tensor& tensor, int src, int tag = 0, bool async_op = false);
  Work barrier(bool async_op = false);

  // Number of collectives issued on this group by this rank so far (the last one's "#").
  uint64_t sequence_number() const;

 private:
  Impl& member(const char* op) const;
  std::shared_ptr<Impl> impl_;
};

struct InitOptions {
  // "" asks the environment (DS_COMM_BACKEND), then the accelerator (its communication_backend_name()).
  std::string backend;
  // Unset: env DS_COMM_TIMEOUT (seconds) or 30 minutes, torch's default.
  std::optional<std::chrono::milliseconds> timeout;
  // Unset: env DS_COMM_CHECK ("1"/"true" turns it on). Costs a store round trip per collective:
  // debugging only.
  std::optional<bool> check_collectives;
  // Rank 0 prints one line describing the world after start-up.
  bool verbose = false;
};

// What the backend of this process's groups does natively; the rest runs through fallbacks. Probed
// once per process (on a private one-rank group, so no peer takes part) when the first group is
// created; every group of the process uses the same answer.
struct BackendCapabilities {
  std::string backend;                  // "gloo"
  // The device kind its collectives take (kCPU for Gloo, kCUDA for NCCL); tensors elsewhere travel through a copy.
  c10::DeviceType device_type = c10::kCPU;
  std::string library_version;          // the LibTorch it comes from, e.g. "2.15.0"
  bool avg = false;                     // ReduceOp::kAvg (else SUM, then a division)
  bool all_gather_into_tensor = false;  // one flat call (else the list all-gather into chunk views)
  bool reduce_scatter_tensor = false;   // one flat call (else all-to-all and a local reduction)
  // ZeRO's partitioned collectives (all_gather_into_tensor, reduce_scatter_tensor) as one broadcast / one reduce
  // per owner's slice, issued together, instead of the flat call. Off by default (the native flat call; on NCCL
  // the per-owner form would be n serial launches); env DS_COMM_PARTITIONED_FORM=per_owner turns it on, which on
  // Gloo measured faster for all-gathers of tens of MiB and slower below 4 MiB (bench_comm_bandwidth, README).
  bool per_owner_partitioned = false;
  // In-place partitioned collectives (all_gather_into_tensor whose input is the output's own chunk, and
  // reduce_scatter_in_place) as one broadcast / reduce per owner even when per_owner_partitioned is off: Gloo's
  // flat calls stage a copy the size of the whole buffer (its all-gather receives into a new flat tensor, its
  // reduce-scatter clones the input and all-reduces it), which the per-owner form does not need. On by default for
  // Gloo; DS_COMM_PARTITIONED_FORM=flat turns it off.
  bool in_place_by_owner = false;
  // Dtypes reduced natively; the others that are floating point reduce in an fp32 copy.
  std::vector<at::ScalarType> reduce_dtypes;
  bool fallbacks_forced = false;  // env DS_COMM_FORCE_FALLBACKS=1 (tests of the fallbacks)
  // One line, for ds_report and logs.
  std::string describe() const;
};
// Of the world group's backend; before init_distributed, of the backend it would choose (DS_COMM_BACKEND, else the
// accelerator's).
BackendCapabilities backend_capabilities();

// Starts the world group from the environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as set by our launcher or torchrun). With none of them set, starts a
// single-process world. Throws deepspeed::Error on a missing or malformed variable, CommError if
// already initialized.
void init_distributed(const InitOptions& options = {});
bool is_initialized();
int get_rank();
int get_world_size();
int get_local_rank();
int get_local_world_size();
// The world group (throws CommError before init_distributed).
ProcessGroup get_world_group();
// Collective over the world: every rank must call it with the same ranks. Members get a working
// group, the others a handle with is_member() == false. `timeout` defaults to the world's.
ProcessGroup new_group(std::vector<int> ranks,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// Barrier over the world.
void barrier();
// Tears down every group and the store; handles still held afterwards throw on use.
void destroy_process_group();
// Which world is current: a new number at every init_distributed, 0 before the first (for code that keeps its own
// objects built over a world and must tell a new world from the one they were built in).
int64_t world_generation();

// The comms logger, after DeepSpeed's "comms_logger" config section.
struct CommsLoggerOptions {
  bool enabled = false;
  bool verbose = false;               // print one line per completed op
  bool prof_all = true;               // profile every op; otherwise only those named in prof_ops
  std::vector<std::string> prof_ops;  // e.g. {"all_reduce", "all_gather_into_tensor"}
  bool debug = false;                 // verbose lines also name the group and sequence number
};
void configure_comms_logger(const CommsLoggerOptions& options);

// Aggregated per (op, message size). Bandwidths in GB/s (1e9 bytes/s): algbw = bytes / latency,
// busbw = algbw * DeepSpeed's factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
// (n-1)/n; others 1). The message size of all_gather/reduce_scatter is the full (world-sized)
// buffer, as DeepSpeed counts it.
struct CommsStat {
  std::string op;
  int64_t msg_bytes = 0;
  int64_t count = 0;
  double total_latency_ms = 0;
  double avg_latency_ms = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};
std::vector<CommsStat> comms_stats();
// Bytes per (op, size of the group it ran on), so that traffic within sub-groups (a host's ranks, say) can be told
// from traffic across the world; message sizes count as in CommsStat.
struct CommsGroupStat {
  std::string op;
  int group_size = 0;
  int64_t bytes = 0;
  int64_t count = 0;
};
std::vector<CommsGroupStat> comms_group_stats();
// The table of comms_stats(); printed to stdout as well when `print`.
std::string log_summary(bool print = true);
void reset_comms_logger();

}  // namespace deepspeed::comm

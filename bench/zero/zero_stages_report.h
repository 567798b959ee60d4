// The ZeRO stages benchmark's rows and its side-by-side table. Each measuring process appends one
// tab-separated Row per configuration to a file; `bench_zero_stages --report FILE` reads them back,
// merges repeated runs of a configuration (times from the interleaved run when there is one,
// memory: the median of the fresh-process runs, the largest beside it) and prints one table with
// the reference points and the checks of the issues (stage 3: time and memory vs stages 2 and 0,
// bytes sent vs the ZeRO paper's 2Ψ/3Ψ): stage 2 within 10% of stage 0's step time; stage 2's peak
// in-use heap and peak tensor bytes each within the estimator's model states plus an allowance
// derived from the same run (stage 0's working set beyond its model states, plus stage 2's
// all-gather transients); and stage 0 -> 2's measured saving as a ratio of the estimator's.
//
// Thread-safety: plain functions of their arguments; print_report writes to stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepspeed::bench {

inline constexpr double kMiB = 1024.0 * 1024.0;

// One measured configuration.
struct Row {
  int stage = 0;
  std::string precision;  // "fp32" or "bf16"
  int world = 0;
  int64_t tokens_per_step = 0;                                       // over all ranks
  double median_s = 0, min_s = 0, fwd_s = 0, bwd_s = 0, step_s = 0;  // slowest rank per step
  double baseline_mib = 0;  // RSS before building the model (max over ranks)
  double peak_mib = 0;      // peak RSS during the timed steps - baseline (max over ranks)
  // Peak in-use heap during the timed steps - its baseline (glibc mallinfo2 uordblks + hblkhd,
  // sampled after forward, backward and step; max over ranks): what the program holds, whatever
  // free pages the allocator's arenas keep cached.
  double heap_mib = 0;
  // Peak live LibTorch CPU tensor bytes during the timed steps - those live at the baseline
  // (counted at every allocation; max over ranks).
  double tensor_mib = 0;
  double states_mib = 0;    // engine.model_state_bytes().total() (max over ranks)
  double estimate_mib = 0;  // the estimator's per-rank total for this stage and precision
  double loss = 0;          // last loss on rank 0, a sanity check that training ran
  double load1 = 0;         // 1-minute load average when the configuration finished
  int hwm_reset = 0;        // 1: VmHWM was reset after warm-up; 0: the sampled maximum was used
  int interleaved = 0;      // 1: times from --interleave (six engines in one process), no memory
  int runs = 1;             // rows merged into this one by merge_rounds
  int prefetch = 1;         // stage 3: 0 when run with stage3_prefetch_bucket_size 0
  // Bytes this rank sends per step (comms-logger window of the interleaved run; stages 2 and 3):
  // all ops, and the all-gather + reduce-scatter + reduce part, each as (n-1)/n of the logged
  // message bytes (2(n-1)/n for all-reduce). psi_mib: Ψ = parameters x bytes of the model dtype.
  double sent_mib = 0, agrs_mib = 0, psi_mib = 0;
  // Set by merge_rounds, not stored: the largest run's memory figures (the fields above hold the
  // median over runs) and how many fresh-process runs measured memory.
  double peak_max_mib = 0, heap_max_mib = 0, tensor_max_mib = 0;
  int memory_runs = 0;

  std::string to_tsv() const;
  // False when `line` does not hold the 23 fields to_tsv writes.
  static bool from_tsv(const std::string& line, Row* row);
};

// What the report needs of the run's configuration beyond the rows.
struct ReportOptions {
  // allgather_bucket_size (elements): stage 2's parameter all-gather after the step holds a
  // gathered chunk, the clone it sends and Gloo's flat staging of the list all-gather at once,
  // (2 + 1/N) x this many elements of the model dtype, which the estimator does not count.
  int64_t allgather_bucket_elems = 2000000;
};

double median(std::vector<double> v);

// One row per (stage, precision, prefetch), fp32 first, stages ascending. Times: the median over
// runs of each run's median, from interleaved rows when a configuration has any; best step: the
// minimum. Memory: the median over the fresh-process runs, and the largest in the *_max_mib fields.
std::vector<Row> merge_rounds(const std::vector<Row>& rows);

// Reads a rows file and merges it. Throws deepspeed::Error naming the file and line of a bad row.
std::vector<Row> read_rows(const std::string& path);

void print_report(const std::vector<Row>& rows, const ReportOptions& options);

}  // namespace deepspeed::bench

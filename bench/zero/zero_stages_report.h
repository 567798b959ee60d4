// The ZeRO stages benchmark's rows and its side-by-side table. Each measuring process appends one
// tab-separated Row per configuration to a file; `bench_zero_stages --report FILE` reads them back,
// merges repeated runs of a configuration (times from the interleaved run when there is one, memory
// from the fresh-process runs) and prints one table with the reference points and the checks of the
// issues (stage 3: time and RSS vs stages 2 and 0, bytes sent vs the ZeRO paper's 2Ψ/3Ψ); stage 2
// within 10% of stage 0's step time, stage 2's RSS below stage 0's and within the estimator's model
// states plus a documented working-set allowance.
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

  std::string to_tsv() const;
  // False when `line` does not hold the 21 fields to_tsv writes.
  static bool from_tsv(const std::string& line, Row* row);
};

// Documented working-set allowance of stage 2 over its model states (MiB per rank), by precision.
struct ReportOptions {
  double allowance_fp32_mib = 400.0;
  double allowance_bf16_mib = 240.0;
};

double median(std::vector<double> v);

// One row per (stage, precision, prefetch), fp32 first, stages ascending. Times: the median over
// runs of each run's median, from interleaved rows when a configuration has any; best step: the
// minimum. Memory: the largest fresh-process run's.
std::vector<Row> merge_rounds(const std::vector<Row>& rows);

// Reads a rows file and merges it. Throws deepspeed::Error naming the file and line of a bad row.
std::vector<Row> read_rows(const std::string& path);

void print_report(const std::vector<Row>& rows, const ReportOptions& options);

}  // namespace deepspeed::bench

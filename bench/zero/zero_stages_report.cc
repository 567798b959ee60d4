// Rows and the side-by-side table of the ZeRO stages benchmark (see zero_stages_report.h).
#include "zero_stages_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "deepspeed/error.h"

namespace deepspeed::bench {
namespace {

// The reference points on this machine kind (same model, 2 ranks, micro 8, fp32).
constexpr double kDeepSpeedStage1Seconds = 1.59;
constexpr double kDeepSpeedStage2Seconds = 1.65;
constexpr double kDeepSpeedPeakMiB = 950.0;
constexpr double kDdpSeconds = 1.41;
constexpr double kDdpPeakMiB = 934.0;
// Stage 2 may be this much slower than stage 0 (the bound).
constexpr double kStage2TimeLimit = 1.10;

const Row* find_row(const std::vector<Row>& rows, int stage, const std::string& precision,
                    int prefetch = 1) {
  for (const auto& r : rows)
    if (r.stage == stage && r.precision == precision && r.prefetch == prefetch) return &r;
  return nullptr;
}

}  // namespace

std::string Row::to_tsv() const {
  std::ostringstream o;
  o << stage << '\t' << precision << '\t' << world << '\t' << tokens_per_step << '\t' << median_s
    << '\t' << min_s << '\t' << fwd_s << '\t' << bwd_s << '\t' << step_s << '\t' << baseline_mib
    << '\t' << peak_mib << '\t' << states_mib << '\t' << estimate_mib << '\t' << loss << '\t'
    << load1 << '\t' << hwm_reset << '\t' << interleaved << '\t' << prefetch << '\t' << sent_mib
    << '\t' << agrs_mib << '\t' << psi_mib << '\t' << heap_mib << '\t' << tensor_mib;
  return o.str();
}

bool Row::from_tsv(const std::string& line, Row* r) {
  std::istringstream in(line);
  return static_cast<bool>(
      in >> r->stage >> r->precision >> r->world >> r->tokens_per_step >> r->median_s >> r->min_s >>
      r->fwd_s >> r->bwd_s >> r->step_s >> r->baseline_mib >> r->peak_mib >> r->states_mib >>
      r->estimate_mib >> r->loss >> r->load1 >> r->hwm_reset >> r->interleaved >> r->prefetch >>
      r->sent_mib >> r->agrs_mib >> r->psi_mib >> r->heap_mib >> r->tensor_mib);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One row per configuration from the rows of several rounds: times are the median over rounds of
// each process's median (a round that met a busy spell on this shared machine does not decide), the
// best step the minimum. Memory likewise: the median over the fresh-process rounds decides, so one
// round whose arenas happened to keep more free pages does not; the largest round's is kept
// beside it (what a run must be sized for).
std::vector<Row> merge_rounds(const std::vector<Row>& rows) {
  std::map<std::tuple<int, std::string, int>, std::vector<Row>> by_config;
  for (const auto& r : rows) by_config[{r.stage, r.precision, -r.prefetch}].push_back(r);
  std::vector<Row> merged;
  for (const auto& item : by_config) {
    const std::vector<Row>& runs = item.second;
    bool any_interleaved = false, any_memory = false;
    for (const auto& r : runs) (r.interleaved ? any_interleaved : any_memory) = true;
    Row m = runs.front();
    m.min_s = 1e300;
    m.states_mib = 0.0;
    m.hwm_reset = 1;
    m.memory_runs = 0;
    std::vector<double> med, fwd, bwd, stp, base, rss, heap, tensor;
    double load = 0.0;
    for (const auto& r : runs) {
      load += r.load1;
      m.sent_mib = std::max(m.sent_mib, r.sent_mib);
      m.agrs_mib = std::max(m.agrs_mib, r.agrs_mib);
      m.psi_mib = std::max(m.psi_mib, r.psi_mib);
      if (!r.interleaved || !any_memory) {
        base.push_back(r.baseline_mib);
        rss.push_back(r.peak_mib);
        heap.push_back(r.heap_mib);
        tensor.push_back(r.tensor_mib);
        m.states_mib = std::max(m.states_mib, r.states_mib);
        if (!r.interleaved) {
          m.hwm_reset = std::min(m.hwm_reset, r.hwm_reset);
          ++m.memory_runs;
        }
      }
      if (any_interleaved && !r.interleaved) continue;
      med.push_back(r.median_s);
      fwd.push_back(r.fwd_s);
      bwd.push_back(r.bwd_s);
      stp.push_back(r.step_s);
      m.min_s = std::min(m.min_s, r.min_s);
    }
    m.baseline_mib = median(base);
    m.peak_mib = median(rss);
    m.heap_mib = median(heap);
    m.tensor_mib = median(tensor);
    m.peak_max_mib = rss.empty() ? 0.0 : *std::max_element(rss.begin(), rss.end());
    m.heap_max_mib = heap.empty() ? 0.0 : *std::max_element(heap.begin(), heap.end());
    m.tensor_max_mib = tensor.empty() ? 0.0 : *std::max_element(tensor.begin(), tensor.end());
    m.median_s = median(med);
    m.fwd_s = median(fwd);
    m.bwd_s = median(bwd);
    m.step_s = median(stp);
    m.load1 = load / static_cast<double>(runs.size());
    m.runs = static_cast<int>(runs.size());
    m.interleaved = any_interleaved ? 1 : 0;
    merged.push_back(m);
  }
  // fp32 first, then bf16; stages ascending within each.
  std::stable_sort(merged.begin(), merged.end(), [](const Row& a, const Row& b) {
    if (a.precision != b.precision) return a.precision == "fp32";
    if (a.stage != b.stage) return a.stage < b.stage;
    return a.prefetch > b.prefetch;
  });
  return merged;
}

std::vector<Row> read_rows(const std::string& path) {
  std::ifstream in(path);
  DS_CHECK(static_cast<bool>(in), "--report: cannot open '", path, "'");
  std::vector<Row> rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    Row r;
    DS_CHECK(Row::from_tsv(line, &r), "--report: ", path, ":", line_no,
             ": expected 23 tab-separated fields, got '", line, "'");
    rows.push_back(r);
  }
  DS_CHECK(!rows.empty(), "--report: no rows in '", path, "'");
  return merge_rounds(rows);
}

void print_report(const std::vector<Row>& rows, const ReportOptions& options) {
  const Row* ref = find_row(rows, 0, "fp32");
  std::printf(
      "\n%-12s %8s %9s %8s %7s | %6s %6s %6s | %8s %8s %8s %8s %8s %8s | %8s %8s %8s | %5s "
      "%5s\n",
      "config", "median s", "tokens/s", "vs s0f32", "best s", "fwd", "bwd", "step", "peak RSS",
      "RSS max", "heap", "heap max", "tensors", "tens max", "states", "estimate", "heap-est",
      "load", "runs");
  std::printf(
      "%-12s %8s %9s %8s %7s | %6s %6s %6s | %8s %8s %8s %8s %8s %8s | %8s %8s %8s | %5s %5s\n", "",
      "", "", "", "", "s", "s", "s", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB",
      "1min", "t/mem");
  for (const auto& r : rows) {
    char name[32];
    std::snprintf(name, sizeof(name), r.prefetch ? "stage %d %s" : "s%d %s nopf", r.stage,
                  r.precision.c_str());
    char vs[16] = "-";
    if (ref) std::snprintf(vs, sizeof(vs), "%.3f", r.median_s / ref->median_s);
    std::printf(
        "%-12s %8.4f %9.0f %8s %7.4f | %6.3f %6.3f %6.3f | %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f | "
        "%8.1f %8.1f %8.1f | %5.2f %2d/%-2d%s\n",
        name, r.median_s, static_cast<double>(r.tokens_per_step) / r.median_s, vs, r.min_s, r.fwd_s,
        r.bwd_s, r.step_s, r.peak_mib, r.peak_max_mib, r.heap_mib, r.heap_max_mib, r.tensor_mib,
        r.tensor_max_mib, r.states_mib, r.estimate_mib, r.heap_mib - r.estimate_mib, r.load1,
        r.runs - r.memory_runs, r.memory_runs, r.hwm_reset ? "" : "  (sampled RSS peak)");
  }
  std::printf(
      "(median s: step time of the slowest rank, median over the timed steps and then over runs; "
      "best s: fastest step; fwd/bwd/step: medians of the engine's phases, bwd includes the "
      "overlapped bucket reduction. Memory, per rank, max over ranks, median over the "
      "fresh-process runs (max: the largest run), each minus its value before the model was "
      "built: peak RSS: peak resident memory during the timed steps (VmHWM); heap: peak in-use "
      "heap (glibc mallinfo2 uordblks + hblkhd, all arenas) sampled after forward, backward and "
      "step: what the program holds, without the free pages glibc's per-thread arenas keep, which "
      "move RSS by tens of MiB run to run; tensors: peak live LibTorch CPU tensor bytes, counted "
      "at every allocation. states: engine.model_state_bytes().total(); estimate: "
      "estimate_model_states_mem_needs per rank incl. stage 2's two fp32 reduce buckets; heap-est: "
      "the working set beyond the formula's model states (activations of micro 8 x seq 128, Gloo "
      "and comm staging buffers, what LibTorch, OpenBLAS and Gloo allocate on the first step). "
      "runs t/mem: timing runs / memory runs; sN ... nopf: stage 3 with "
      "stage3_prefetch_bucket_size 0)\n");
  std::printf(
      "reference points (same model, 2 ranks, micro 8, fp32, this machine kind): DeepSpeed Python "
      "engine stage 1 ~%.2f s, stage 2 ~%.2f s, ~%.0f MiB peak resident per rank (whole process); "
      "PyTorch DDP ~%.2f s, ~%.0f MiB\n",
      kDeepSpeedStage1Seconds, kDeepSpeedStage2Seconds, kDeepSpeedPeakMiB, kDdpSeconds,
      kDdpPeakMiB);
  for (const char* p : {"fp32", "bf16"}) {
    const Row* s0 = find_row(rows, 0, p);
    const Row* s1 = find_row(rows, 1, p);
    const Row* s2 = find_row(rows, 2, p);
    if (!s0 || !s2) continue;
    const double ratio = s2->median_s / s0->median_s;
    std::printf("%s: stage 2 / stage 0 time %.3f (limit %.2f: %s)\n", p, ratio, kStage2TimeLimit,
                ratio <= kStage2TimeLimit ? "ok" : "OVER");
    // The verdict, in each of the two stable measures: stage 2 <= the formula's model states +
    // an allowance that is measured, not chosen: what stage 0 of the same run holds beyond the
    // formula's model states (activations, Gloo and comm staging buffers, what LibTorch, OpenBLAS
    // and Gloo allocate on the first step: the same model, batch and comm layer as stage 2), plus
    // stage 2's parameter all-gather transients, which the formula leaves out.
    const double n = s2->world;
    const double transient = (2.0 + 1.0 / n) * static_cast<double>(options.allgather_bucket_elems) *
                             (std::string(p) == "fp32" ? 4.0 : 2.0) / kMiB;
    auto verdict = [&](const char* measure, double w0, double w2, double w2_max) {
      const double allowance = w0 - s0->estimate_mib + transient;
      const double bound = s2->estimate_mib + allowance;
      std::printf(
          "%s: stage 2 %s %.1f MiB (max %.1f) <= estimate %.1f + allowance %.1f (stage 0's %.1f - "
          "its estimate %.1f + all-gather transients %.1f) = %.1f MiB: %s\n",
          p, measure, w2, w2_max, s2->estimate_mib, allowance, w0, s0->estimate_mib, transient,
          bound, w2 <= bound ? "ok" : "OVER");
    };
    verdict("in-use heap", s0->heap_mib, s2->heap_mib, s2->heap_max_mib);
    verdict("tensors", s0->tensor_mib, s2->tensor_mib, s2->tensor_max_mib);
    // The formula's saving, shown in each memory measure: stage 0 - stage 2 measured vs the
    // estimator's stage 0 - stage 2 (and vs the engine's own model-state accounting).
    const double predicted = s0->estimate_mib - s2->estimate_mib;
    const double accounted = s0->states_mib - s2->states_mib;
    auto saved = [&](double a, double b) { return predicted > 0.0 ? (a - b) / predicted : 0.0; };
    std::printf(
        "%s: saving stage 0 -> 2: estimator %.1f MiB (engine's model_state_bytes %.1f); measured: "
        "in-use heap %.1f (%.2f x the estimator's), tensors %.1f (%.2f x), RSS %.1f (%.2f x)\n",
        p, predicted, accounted, s0->heap_mib - s2->heap_mib, saved(s0->heap_mib, s2->heap_mib),
        s0->tensor_mib - s2->tensor_mib, saved(s0->tensor_mib, s2->tensor_mib),
        s0->peak_mib - s2->peak_mib, saved(s0->peak_mib, s2->peak_mib));
    if (std::string(p) == "fp32") {
      std::printf(
          "fp32 vs references: stage 1 %.3f x DeepSpeed stage 1, stage 2 %.3f x DeepSpeed stage 2, "
          "stage 0 %.3f x DDP (< 1: ours is faster)\n",
          s1 ? s1->median_s / kDeepSpeedStage1Seconds : 0.0, s2->median_s / kDeepSpeedStage2Seconds,
          s0->median_s / kDdpSeconds);
      std::printf(
          "whole-process peak RSS per rank (baseline + peak): stage 0 %.1f, stage 1 %.1f, stage 2 "
          "%.1f MiB (DeepSpeed ~%.0f at stages 1 and 2, DDP ~%.0f)\n",
          s0->baseline_mib + s0->peak_mib, s1 ? s1->baseline_mib + s1->peak_mib : 0.0,
          s2->baseline_mib + s2->peak_mib, kDeepSpeedPeakMiB, kDdpPeakMiB);
    }
    const Row* s3 = find_row(rows, 3, p);
    const Row* s3n = find_row(rows, 3, p, 0);
    if (s3) {
      std::printf(
          "%s: stage 3 / stage 2 time %.3f, / stage 0 %.3f; stage 3 in-use heap %.1f MiB vs stage "
          "2 %.1f (%+.1f) vs stage 0 %.1f (%+.1f), RSS %.1f vs %.1f vs %.1f; estimate %.1f MiB\n",
          p, s3->median_s / s2->median_s, s3->median_s / s0->median_s, s3->heap_mib, s2->heap_mib,
          s3->heap_mib - s2->heap_mib, s0->heap_mib, s3->heap_mib - s0->heap_mib, s3->peak_mib,
          s2->peak_mib, s0->peak_mib, s3->estimate_mib);
    }
    if (s3 && s3n)
      std::printf(
          "%s: stage 3 prefetch off / on time %.3f (%.4f vs %.4f s); in-use heap off %.1f vs on "
          "%.1f MiB\n",
          p, s3n->median_s / s3->median_s, s3n->median_s, s3->median_s, s3n->heap_mib,
          s3->heap_mib);
    // The ZeRO paper counts a collective's volume as the data it moves, Ψ per all-gather or
    // reduce-scatter of the whole model (its ring cost is Ψ(n-1)/n per rank, rounded to Ψ): stage 2
    // 2Ψ (reduce-scatter gradients + all-gather parameters), stage 3 3Ψ (all-gather in forward and
    // in backward + reduce-scatter). Our logged messages are the full buffers; sent = (n-1)/n of
    // them.
    for (const Row* r : {s2, s3, s3n}) {
      if (!r || r->psi_mib <= 0.0 || r->sent_mib <= 0.0) continue;
      const double n = r->world;
      const double paper = r->stage == 2 ? 2.0 : 3.0;
      const double msgs = r->agrs_mib * n / (n - 1);
      std::printf(
          "%s stage %d%s bytes per rank per step: all-gather + broadcast + reduce-scatter + reduce "
          "messages "
          "%.1f MiB = "
          "%.2f Ψ (paper %.0fΨ), sent %.1f MiB = %.2f Ψ (paper %.0fΨ x (n-1)/n = %.2fΨ); all ops "
          "sent %.1f MiB (Ψ = %.1f MiB)\n",
          p, r->stage, r->prefetch ? "" : " no-prefetch", msgs, msgs / r->psi_mib, paper,
          r->agrs_mib, r->agrs_mib / r->psi_mib, paper, paper * (n - 1) / n, r->sent_mib,
          r->psi_mib);
    }
  }
  std::fflush(stdout);
}

}  // namespace deepspeed::bench

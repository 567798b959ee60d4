// Engine::save_checkpoint / load_checkpoint time and bytes for the reference GPT at a ZeRO stage (3 unless --stage),
// against raw file I/O of the same bytes in the same run (issue 7):
//
//   build/bin/deepspeed --num_procs 2 build/bin/bench_engine_checkpoint [--stage 3 --rounds 5 --steps 2
//       --dir $TMPDIR/ds_engine_ckpt_bench]
//
// The last columns time what the load spends checking the records no rank copies from (issue 52: the module weights
// of the model file at stages 0-2), alone and from a cold cache, as a fraction of the load. Sample (2 ranks, 7
// rounds, 2026-12-06): stage 2 (fp32 module, 55 MB in the model file) 0.038-0.058 s, 0.16-0.25 of the load; stage 3
// 0.001 s (its model file holds no weights). A bf16 module halves the stage-2 figure.
//
// The model is the one the other benches use (GPT vocab 4096, hidden 384, 6 layers, 6 heads, seq
// 128, untied head: 13.8M parameters), built at stage 3 with every block a unit inside zero::Init,
// AdamW, fp32, micro-batch 8 per rank. After --steps training steps, each round runs, per rank:
// a raw write (write() + fsync of a file of this rank's checkpoint bytes, random data, same dir),
// the save (engine.save_checkpoint(dir, "bench"): crash-safe, so temporary, fsync, rename, dir
// fsync), a raw read (read() of the raw file into a buffer reused across rounds) and the load
// (engine.load_checkpoint(dir) into the same engine).
// Every step starts behind a barrier, so the ranks share the disk as they do in a real save. Before
// each read the page cache of every file involved is dropped (fdatasync + POSIX_FADV_DONTNEED), on
// both sides. A rank's bytes are the files it writes (its zero_pp_rank_<r>_* files, rank 0 also
// mp_rank_00_model_states.pt); the load reads its own partition from them. Times are medians over
// rounds; "max" is the slowest rank (a collective save is as slow as its slowest rank). Ratios are
// speeds relative to raw (1.00 = as fast as the raw write / read; higher is better).
//
// Sample (2-core VM, ext4 on virtio, 2 ranks, 5 rounds; this machine is shared and noisy), the
// printed table without its MB/s columns:
//   rank    MB | save s  raw wr s  ratio | load s  raw rd s  ratio
//   0     83.1 |  0.236     0.203   0.86 |  0.094     0.033   0.36
//   1     83.1 |  0.237     0.200   0.85 |  0.094     0.035   0.38
//   max   83.1 |  0.237     0.203   0.86 |  0.094     0.035   0.38
// Over runs: save 0.6-0.86x of raw write, load 0.25-0.42x of raw read. The load maps every rank's
// file and copies this rank's elements out of the mapping (engine_checkpoint_load.cc,
// partition_index.cc), so it pays a page fault per 64 KiB of file, which this VM makes costly; the
// raw read is largely served from the host's cache.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "drop_cache.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "gpt.h"

namespace {

using deepspeed::bench::drop_cache;

namespace dc = deepspeed::comm;
namespace ckpt = deepspeed::checkpoint;
using Clock = std::chrono::steady_clock;
using deepspeed::bench::seconds_since;

struct Args {
  int stage = 3;
  int64_t rounds = 5;
  int64_t steps = 2;
  int64_t micro = 8;
  int64_t seed = 1234;
  std::string dir;
  bool keep = false;
  deepspeed::models::GPTConfig model = deepspeed::bench::reference_gpt();
};

const char* kTag = "bench";

std::string config_json(const Args& args) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), R"({
    "train_micro_batch_size_per_gpu": %lld,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0,
    "steps_per_print": 1000000000,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                              "weight_decay": 0.01}},
    "zero_optimization": {"stage": %d, "overlap_comm": true, "reduce_bucket_size": 2000000,
                          "stage3_param_persistence_threshold": 1000,
                          "stage3_max_live_parameters": 6000000,
                          "stage3_prefetch_bucket_size": 4000000}
  })",
                static_cast<long long>(args.micro), args.stage);
  return buf;
}

void check_io(bool ok, const char* what, const std::string& path) {
  if (!ok) throw std::runtime_error(std::string(what) + " " + path + " failed");
}

void raw_write(const std::string& path, const std::vector<char>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check_io(fd >= 0, "open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    check_io(n > 0, "write", path);
    done += static_cast<size_t>(n);
  }
  check_io(::fsync(fd) == 0, "fsync", path);
  ::close(fd);
}

void raw_read(const std::string& path, std::vector<char>& buf) {
  int fd = ::open(path.c_str(), O_RDONLY);
  check_io(fd >= 0, "open", path);
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + done, buf.size() - done);
    check_io(n > 0, "read", path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// The files of the tag this rank wrote, by DeepSpeed's names.
std::vector<std::string> files_of_rank(const std::string& dir, int rank) {
  std::vector<std::string> out;
  const std::string tag_dir = ckpt::tag_dir(dir, kTag);
  for (const std::string& name : ckpt::default_file_system()->list_dir(tag_dir)) {
    std::optional<ckpt::CheckpointFileName> parsed = ckpt::parse_checkpoint_file_name(name);
    if (!parsed) continue;
    if (parsed->dp_rank == rank || (parsed->dp_rank < 0 && rank == 0))
      out.push_back(tag_dir + "/" + name);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum Column { kRawWrite, kSave, kRawRead, kLoad, kShareCheck, kColumns };

// What a load adds to check the records no rank copies from (verify_record_share, issue 52), timed alone: the model
// file mapped afresh (its cache dropped) and this rank's share of its records checked, as EngineImpl::load_checkpoint
// does (the rank files' records are, at the saved world size, checked by their owners as they copy from them).
void share_check(const std::string& dir, int rank, int world) {
  const ckpt::StateDict model = ckpt::load_state(ckpt::model_states_path(dir, kTag),
                                                 ckpt::LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
  ckpt::verify_record_share(model, rank, world);
}

int run(const Args& args) {
  dc::init_distributed();
  const int rank = dc::get_rank(), world = dc::get_world_size();
  std::string dir = args.dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/ds_engine_ckpt_bench";
  }

  at::manual_seed(static_cast<uint64_t>(args.seed));
  auto config = deepspeed::Config::from_string(config_json(args));
  deepspeed::models::GPTConfig cfg = args.model;
  cfg.shard_blocks = true;
  std::optional<deepspeed::models::GPT> model;
  {
    deepspeed::zero::Init init(config);
    model.emplace(cfg);
  }
  deepspeed::Engine engine = deepspeed::initialize(*model, config);

  at::manual_seed(static_cast<uint64_t>(args.seed + 1 + rank));
  for (int64_t s = 0; s < args.steps; ++s) {
    at::Tensor tokens = at::randint(cfg.vocab_size, {args.micro, cfg.seq_len + 1}, at::kLong);
    at::Tensor loss = engine.forward(tokens.narrow(1, 0, cfg.seq_len).contiguous(),
                                     tokens.narrow(1, 1, cfg.seq_len).contiguous());
    engine.backward(loss);
    engine.step();
  }

  // One untimed save tells each rank its bytes (and warms the code paths on both sides).
  engine.save_checkpoint(dir, std::string(kTag));
  std::vector<std::string> mine = files_of_rank(dir, rank);
  int64_t bytes = 0;
  for (const std::string& f : mine) bytes += static_cast<int64_t>(std::filesystem::file_size(f));
  std::vector<std::string> all_files;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt::tag_dir(dir, kTag)))
    all_files.push_back(entry.path().string());

  const std::string raw_path = dir + "/raw_rank" + std::to_string(rank) + ".bin";
  std::vector<char> payload(static_cast<size_t>(bytes)), back(static_cast<size_t>(bytes));
  {
    at::Tensor noise = at::randint(256, {bytes}, at::kByte);
    std::memcpy(payload.data(), noise.data_ptr(), payload.size());
  }

  std::vector<std::vector<double>> times(kColumns);
  auto timed = [&](Column c, const auto& fn) {
    dc::barrier();
    const auto t0 = Clock::now();
    fn();
    times[c].push_back(seconds_since(t0));
  };
  for (int64_t r = 0; r < args.rounds; ++r) {
    timed(kRawWrite, [&] { raw_write(raw_path, payload); });
    timed(kSave, [&] { engine.save_checkpoint(dir, std::string(kTag)); });
    drop_cache(raw_path);
    timed(kRawRead, [&] { raw_read(raw_path, back); });
    for (const std::string& f : all_files) drop_cache(f);
    timed(kLoad, [&] {
      if (!engine.load_checkpoint(dir)) throw std::runtime_error("load_checkpoint found nothing");
    });
    for (const std::string& f : all_files) drop_cache(f);
    timed(kShareCheck, [&] { share_check(dir, rank, world); });
  }

  // Per-rank medians to rank 0: row r of a [world, columns + 1] table, summed.
  at::Tensor table = at::zeros({world, kColumns + 1}, at::kDouble);
  for (int c = 0; c < kColumns; ++c) table[rank][c] = median(times[c]);
  table[rank][kColumns] = static_cast<double>(bytes);
  dc::get_world_group().all_reduce(table, dc::ReduceOp::kSum);

  if (rank == 0) {
    auto t = table.accessor<double, 2>();
    std::printf(
        "engine checkpoint, GPT %lldx%lld %lld layers (stage %d, AdamW, fp32), %d ranks, median of "
        "%lld rounds, dir %s\n",
        static_cast<long long>(cfg.vocab_size), static_cast<long long>(cfg.hidden),
        static_cast<long long>(cfg.layers), args.stage, world, static_cast<long long>(args.rounds),
        dir.c_str());
    std::printf(
        "  rank      MB |  save s  raw wr s  save MB/s  raw MB/s  ratio |  load s  raw rd s  load "
        "MB/s  raw MB/s  ratio | share check s  of load\n");
    double worst[kColumns] = {0, 0, 0, 0, 0}, max_mb = 0;
    auto row = [&](const char* name, const double* v, double mb) {
      std::printf(
          "  %-5s %7.1f | %7.3f  %8.3f  %9.0f  %8.0f  %5.2f | %7.3f  %8.3f  %9.0f  %8.0f  "
          "%5.2f | %13.3f  %6.2f\n",
          name, mb, v[kSave], v[kRawWrite], mb / v[kSave], mb / v[kRawWrite],
          v[kRawWrite] / v[kSave], v[kLoad], v[kRawRead], mb / v[kLoad], mb / v[kRawRead],
          v[kRawRead] / v[kLoad], v[kShareCheck], v[kShareCheck] / v[kLoad]);
    };
    for (int r = 0; r < world; ++r) {
      double v[kColumns];
      for (int c = 0; c < kColumns; ++c) {
        v[c] = t[r][c];
        worst[c] = std::max(worst[c], v[c]);
      }
      const double mb = t[r][kColumns] / 1e6;
      max_mb = std::max(max_mb, mb);
      row(std::to_string(r).c_str(), v, mb);
    }
    row("max", worst, max_mb);
    std::fflush(stdout);
  }
  dc::barrier();
  std::filesystem::remove(raw_path);
  if (!args.keep && rank == 0) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Engine save_checkpoint / load_checkpoint vs raw write/read"};
  app.add_option("--stage", args.stage, "ZeRO stage (the model is built inside zero::Init at stage 3)")
      ->check(CLI::Range(0, 3));
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--rounds", args.rounds, "timed save/load rounds")->check(CLI::PositiveNumber);
  app.add_option("--steps", args.steps, "training steps before the first save")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dir", args.dir, "checkpoint directory (default $TMPDIR/ds_engine_ckpt_bench)");
  app.add_flag("--keep", args.keep, "leave the checkpoint directory in place");
  app.add_option("--micro", args.micro, "micro-batch per rank")->check(CLI::PositiveNumber);
  app.add_option("--seed", args.seed, "model and data seed");
  app.add_option("--layers", args.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--hidden", args.model.hidden, "hidden size")->check(CLI::PositiveNumber);
  int local_rank = 0;  // passed by the launcher; LOCAL_RANK in the environment is what is used
  app.add_option("--local_rank", local_rank, "set by the launcher");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine_checkpoint: %s\n", e.what());
    return 1;
  }
}

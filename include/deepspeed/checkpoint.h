// Checkpoint files in DeepSpeed's layout: crash-safe writes, path helpers, state-dict
// (de)serialization in torch's zip format, metadata checks, and fp32 consolidation of ZeRO
// partitions (`ds_to_fp32`).
//
// Layout (DeepSpeed's names, so its users find what they expect):
//   <dir>/latest                                         text file holding the tag, written last
//   <dir>/<tag>/mp_rank_00_model_states.pt               module state, counters, config, client
//   state <dir>/<tag>/zero_pp_rank_<r>_mp_rank_00_optim_states.pt   data-parallel rank r's
//   optimizer partition
// The default tag is `global_step<N>`.
//
// Crash safety: every file (and `latest`) is written as `<name>.tmp.<pid>`, fsynced, renamed to its
// final name and its directory fsynced. A final name therefore only ever holds a complete file, and
// `latest` moves to a new tag only after that tag's files are durable. All file-system access goes
// through `FileSystem`, so tests can inject faults (a writer that dies after N bytes) the way
// LevelDB's fault-injection tests do.
//
// Files are torch zip archives in torch.save's layout (data.pkl, then one data/<key> record per
// storage, streamed from each tensor's memory into the file): Python's `torch.load` reads them as
// plain dicts of tensors. A state is a `StateDict`: string keys mapping to tensors, ints, doubles,
// bools, strings, lists and nested dicts. Tensors are saved compactly: a view saves only its own
// elements, not its whole storage.
//
// Thread-safety: the free functions keep no state and may run concurrently on different paths. The
// default FileSystem is stateless and thread-safe.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::checkpoint {

// A checkpoint file that is missing, truncated, not a checkpoint, or from another run/format. The
// message names the file and what is wrong with it, on one line.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A checkpoint file whose bytes changed after it was written: a zip record's CRC-32 does not match
// its data. The message names the file and the record (and the entry it holds, when known).
class CheckpointCorruptError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// A string-keyed dict of anything picklable. LibTorch has no default constructor for it: use
// make_state_dict().
using StateDict = c10::Dict<std::string, c10::IValue>;
// An empty StateDict (Dict[str, Any]); nested dicts are made the same way.
StateDict make_state_dict();
// An empty untyped dict (Dict[str, Any]) and list (List[Any]), the values a StateDict nests.
c10::impl::GenericDict make_any_dict();
c10::impl::GenericList make_any_list();

// ---------------------------------------------------------------------------------------------------------------
// File-system seam.

// A file being written. append() may be called many times; sync() makes the appended bytes durable;
// close() releases the handle. Any failure throws.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual void append(const char* data, size_t size) = 0;
  virtual void sync() = 0;
  virtual void close() = 0;
};

// Every file-system call the checkpoint layer makes. Failures throw CheckpointError naming the
// path.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates (truncating) `path` for writing.
  virtual std::unique_ptr<WritableFile> new_writable_file(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (POSIX rename).
  virtual void rename_file(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries (creations, renames) durable.
  virtual void sync_dir(const std::string& dir) = 0;
  virtual void remove_file(const std::string& path) = 0;
  // Creates `dir` and its missing parents.
  virtual void create_dirs(const std::string& dir) = 0;
  virtual bool file_exists(const std::string& path) = 0;
  // The whole file; CheckpointError("... missing") when it does not exist.
  virtual std::vector<char> read_file(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual std::vector<std::string> list_dir(const std::string& dir) = 0;
  virtual bool is_dir(const std::string& path) = 0;
  // Removes the empty directory `dir` (a missing one is not an error).
  virtual void remove_dir(const std::string& dir) = 0;
};

// The POSIX file system. Never null; lives for the whole process.
FileSystem* default_file_system();

// The temporary name this process writes `path` under: `<path>.tmp.<pid>.<host>`, so concurrent
// writers (ranks sharing a directory, on one host or several) never collide, and a later save can
// tell whether the writer still lives (remove_stale_files).
std::string temporary_path(const std::string& path);

// Writes `size` bytes to `path` crash-safely: temporary_path(path), fsync, rename, fsync of the
// parent directory. On failure the temporary file is removed (best effort) and the exception
// propagates; `path` is untouched.
void write_file_atomic(const std::string& path, const char* data, size_t size,
                       FileSystem* fs = nullptr);

// Streams a file of unknown content crash-safely: `write` appends to the temporary file, then the
// same sync/rename/sync-dir sequence as write_file_atomic runs.
void write_file_atomic(const std::string& path, const std::function<void(WritableFile&)>& write,
                       FileSystem* fs = nullptr);

// ---------------------------------------------------------------------------------------------------------------
// Layout and names.

// "global_step<N>", DeepSpeed's default tag.
std::string default_tag(int64_t global_steps);
std::string tag_dir(const std::string& dir, const std::string& tag);
std::string latest_path(const std::string& dir);
// <dir>/<tag>/mp_rank_<mp:02d>_model_states.pt
std::string model_states_path(const std::string& dir, const std::string& tag, int mp_rank = 0);
// <dir>/<tag>/layer_<layer>_expert_<expert>_mp_rank_<mp:02d>_model_states.pt: one MoE expert's weights (global
// expert id; layer = the MoE layer's index among the model's MoE layers), as DeepSpeed names them.
std::string expert_model_states_path(const std::string& dir, const std::string& tag, int64_t layer,
                                     int64_t expert, int mp_rank = 0);
// <dir>/<tag>/zero_pp_rank_<dp>_mp_rank_<mp:02d>_model_states.pt (ZeRO-3's per-rank module
// partitions)
std::string zero_model_states_path(const std::string& dir, const std::string& tag, int dp_rank,
                                   int mp_rank = 0);
// <dir>/<tag>/zero_pp_rank_<dp>_mp_rank_<mp:02d>_optim_states.pt
std::string optim_states_path(const std::string& dir, const std::string& tag, int dp_rank,
                              int mp_rank = 0);

// What a checkpoint file name says about itself.
struct CheckpointFileName {
  enum class Kind { kModelStates, kZeroModelStates, kOptimStates };
  Kind kind = Kind::kModelStates;
  int dp_rank = -1;  // -1 for mp_rank_XX_model_states.pt
  int mp_rank = 0;
};
// Parses a file name (not a path) of the layout above; nullopt for anything else (temporaries
// included).
std::optional<CheckpointFileName> parse_checkpoint_file_name(const std::string& file_name);

// Paths of every zero_pp_rank_<r>_mp_rank_<mp>_optim_states.pt under <dir>/<tag>, ordered by rank.
// Throws when the tag directory is missing or the ranks are not exactly 0..N-1 (names the first
// missing rank).
std::vector<std::string> list_optim_states_files(const std::string& dir, const std::string& tag,
                                                 int mp_rank = 0, FileSystem* fs = nullptr);

// Writes <dir>/latest = tag crash-safely. Call it after every file of the tag is written.
void write_latest(const std::string& dir, const std::string& tag, FileSystem* fs = nullptr);
// The tag in <dir>/<file_name> (whitespace trimmed): `latest`, or `latest_universal` for a universal checkpoint.
// Throws CheckpointError when it is missing or empty.
std::string read_latest(const std::string& dir, FileSystem* fs = nullptr,
                        const std::string& file_name = "latest");
// `tag` when given, else read_latest(dir).
std::string resolve_tag(const std::string& dir, const std::optional<std::string>& tag,
                        FileSystem* fs = nullptr);
// A path the tools take as a checkpoint: a tag folder <dir>/<tag> gives {dir, tag}; a checkpoint directory holding
// `latest` gives {path, ""} (the tag `latest` names). Trailing slashes are ignored.
std::pair<std::string, std::string> split_checkpoint_path(std::string path, FileSystem* fs = nullptr);

// ---------------------------------------------------------------------------------------------------------------
// Leftovers of saves that died.
//
// While a process saves a tag it keeps the marker <dir>/<tag>/.ds_saving.<pid>.<host>
// (begin_tag_save), removed once every rank's files and `latest` are written (end_tag_save). A
// process killed mid-save leaves its marker, a temporary file (temporary_path) and a partial tag
// directory behind; the next save removes them with remove_stale_files. A writer counts as gone
// only when it ran on this host and kill(pid, 0) fails with ESRCH.

// Creates <dir>/<tag> and this process's saving marker in it.
void begin_tag_save(const std::string& dir, const std::string& tag, FileSystem* fs = nullptr);
// Removes this process's saving marker (best effort: never throws).
void end_tag_save(const std::string& dir, const std::string& tag,
                  FileSystem* fs = nullptr) noexcept;

struct StaleFileOptions {
  // The tag being saved now: its directory stays whatever it holds.
  std::string keep_tag;
  // Every writer of `dir` ran on this host: temporaries named without a host (<path>.tmp.<pid>, as
  // older builds wrote them) are judged too.
  bool single_host = false;
};
// Removes under `dir` what writers of this host that are gone left behind, and returns the removed
// paths:
//  - their temporaries, in `dir` and in each tag directory;
//  - a tag directory holding the saving marker of a gone writer and no marker of any other
//    writer, unless `latest` names it, it is options.keep_tag, it holds a subdirectory, or it is
//    complete (its mp_rank_00_model_states.pt and every zero_pp_rank_<r> optimizer file, as many
//    as partition_count says): such a directory keeps its files and loses only the gone writers'
//    markers.
// A writer on another host, or whose pid now belongs to a live process, is never judged gone. A
// missing `dir` is not an error. Throws CheckpointError when a removal fails.
std::vector<std::string> remove_stale_files(const std::string& dir,
                                            const StaleFileOptions& options = {},
                                            FileSystem* fs = nullptr);

// ---------------------------------------------------------------------------------------------------------------
// Serialization.

// Serializes `state` (torch zip format) and writes it to `path` crash-safely, creating the parent
// directory. Tensors must be on the CPU; views and non-contiguous tensors are saved as compact
// copies of their elements.
void save_state(const std::string& path, const StateDict& state, FileSystem* fs = nullptr);
// The bytes save_state would write.
std::vector<char> serialize_state(const StateDict& state);

struct LoadOptions {
  // Map the file instead of reading it: tensors then point into a private (copy-on-write) mapping
  // and pages are read when touched, so memory stays bounded by what the caller touches. Only for
  // files nobody truncates while they are mapped (our writers never modify a file in place: they
  // rename a new one over it).
  bool mmap = false;
  FileSystem* fs = nullptr;  // used when mmap is false
  // Check the CRC-32 of every record while loading (one pass over the file, ~2.7 GB/s per core).
  // false: only data.pkl is checked, and the caller checks each tensor it uses with
  // verify_tensor() before using it: for mapped files of which a caller reads only a part (every
  // rank maps every rank file of a checkpoint, and copies from a few records of them).
  bool verify_checksums = true;
};
// Loads a file written by save_state. Throws CheckpointError naming the file when it is missing,
// truncated, not a torch zip archive, or does not hold a string-keyed dict, and
// CheckpointCorruptError naming the file and the record when a record fails its CRC-32.
StateDict load_state(const std::string& path, const LoadOptions& options = {});
// Parses bytes from serialize_state; `name` is used in error messages. Every record's CRC-32 is
// checked.
StateDict deserialize_state(std::vector<char> bytes, const std::string& name);
// Checks the CRC-32 of the record holding `t`, a tensor (or a view of one) that load_state
// returned; each record is checked at most once per load. `what` names the entry in the error
// message. A no-op for tensors that did not come from load_state. Throws CheckpointCorruptError
// naming the file, the record and `what`. Thread-safe.
void verify_tensor(const at::Tensor& t, const std::string& what = "");
// Checks the CRC-32 of one share of the records of the file `state` came from (load_state with
// verify_checksums false): records i with i % shares == share, each named by its entry in `state`
// (records already checked are skipped). A load that reads only part of the mapped files it opens
// calls it on each rank with (its rank, world size), so every record of every file is checked by
// some rank, at 1/world of the file per rank: a flipped byte in a record no rank reads (the module
// weights of a stage-1/2 model file, another world size's RNG state) still fails the load. A no-op
// for a state without tensors from load_state. Throws CheckpointCorruptError as verify_tensor.
void verify_record_share(const StateDict& state, int share, int shares);

// ---------------------------------------------------------------------------------------------------------------
// Metadata and validation.

// Bumped when the meaning of a key changes; a reader refuses formats newer than its own.
constexpr int64_t kCheckpointFormat = 1;
constexpr const char* kFormatKey = "ds_checkpoint_format";
constexpr const char* kVersionKey = "ds_version";
constexpr const char* kRunIdKey = "ds_run_id";

// This build's version string (the value stamped under ds_version).
std::string ds_version();
// Adds ds_checkpoint_format, ds_version and ds_run_id to `state`.
void stamp_metadata(StateDict& state, const std::string& run_id);
// Checks the stamp: the file is ours (format key present), its format is one this build reads, and,
// when `expected_run_id` is not empty, it comes from that run. Throws CheckpointError naming `file`
// and the field.
void check_metadata(const StateDict& state, const std::string& file,
                    const std::string& expected_run_id = "");

// The value at a '/'-separated path of nested dict keys ("module/fc.weight"); nullopt when any step
// is missing or not a dict. ('/' because parameter names contain dots.)
std::optional<c10::IValue> find_entry(const StateDict& state, const std::string& key_path);

struct ExpectedTensor {
  std::string key;  // '/'-separated path, as find_entry
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};
// Checks that every `required_keys` path exists and every expected tensor exists with that shape
// and dtype. Throws CheckpointError naming `file`, the key and the value that differs (expected vs
// found).
void check_state(const StateDict& state, const std::string& file,
                 const std::vector<std::string>& required_keys,
                 const std::vector<ExpectedTensor>& tensors);

// ---------------------------------------------------------------------------------------------------------------
// fp32 consolidation: the contract between the engine and ds_to_fp32.
//
// Every zero_pp_rank_<r>_mp_rank_00_optim_states.pt of a tag holds, besides whatever else the
// engine keeps:
//   "ds_checkpoint_format", "ds_version", "ds_run_id"  (stamp_metadata)
//   "partition_count": int     the data-parallel world size N (every rank file must agree, ranks
//   0..N-1 present) "dp_rank": int             r "fp32_flat_groups": list of Tensor, one per
//   parameter group: rank r's flat fp32 partition of that group
//                      (1-D, float32; padding allowed anywhere not covered by a slice)
//   "param_slices": list (one per group, same length as fp32_flat_groups) of lists of dicts, one
//   dict per
//                   parameter fragment held in that partition:
//       {"name": str,           parameter name as in the module's state dict
//       ("blocks.0.attn.weight")
//        "shape": list of int,  the full parameter's shape
//        "begin": int, "end": int,   [begin, end) of the flattened full parameter held here
//        "offset": int}         where fp32_flat_groups[g][offset : offset + end - begin] holds
//        those elements
// A parameter may be split over any number of ranks and groups in any proportions; the union of its
// fragments over all ranks must cover [0, numel) exactly once. Shapes must agree between fragments.
// Parameters appear in the output in the order their first fragment is met (rank 0 first, groups in
// order, slices in order). Optionally, mp_rank_00_model_states.pt may list "buffer_names" (list of
// str) whose tensors are taken, as they are, from its "module" dict (non-parameter state such as
// running statistics).
constexpr const char* kPartitionCountKey = "partition_count";
constexpr const char* kDpRankKey = "dp_rank";
constexpr const char* kFp32FlatGroupsKey = "fp32_flat_groups";
constexpr const char* kParamSlicesKey = "param_slices";
constexpr const char* kBufferNamesKey = "buffer_names";
constexpr const char* kModuleKey = "module";
// With tensor parallelism each tensor rank's mp_rank_<t>_model_states.pt maps the name of every parameter the tp
// layers split to [dimension, fused blocks] (deepspeed/tp/parallel_linear.h's SplitParameter): how the tensor ranks'
// slices join into the whole parameter (ds_to_universal) and split again at another size.
constexpr const char* kTensorParallelLayoutKey = "tp_partitions";

struct ConsolidateStats {
  int64_t tensors = 0;
  int64_t bytes = 0;  // tensor bytes written
  int64_t largest_tensor_bytes = 0;
  int ranks = 0;
};

// Merges the fp32 partitions of <dir>/<tag> (tag empty: `latest`; ours, or one Python DeepSpeed wrote) into one
// file at `out_path`
// (written crash-safely): safetensors for *.safetensors, torch.save's format (a dict of name ->
// tensor, what torch.load reads) for *.pt, *.pth and *.bin; another extension is an error. The
// rank files are mapped, not read; safetensors output streams one parameter at a time (memory
// bounded by the largest parameter), torch output holds only the parameters that straddle
// partitions at once. Throws CheckpointError naming the file
// and parameter on any inconsistency (missing rank, gap or overlap in a parameter's coverage, shape
// disagreement, slice outside its partition).
ConsolidateStats consolidate_fp32(const std::string& dir, const std::string& tag,
                                  const std::string& out_path, FileSystem* fs = nullptr);

// The fp32 parameters of <dir>/<tag> (tag empty: `latest`) one at a time, in the checkpoint's order, without writing
// a file: `visit(name, shape, read)`, where read() assembles that parameter whole from the ranks' mapped partitions
// (a visitor that only checks names and shapes reads nothing). Memory: one parameter beyond the mappings. The same
// CheckpointErrors as consolidate_fp32.
void for_each_fp32_parameter(const std::string& dir, const std::string& tag,
                             const std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                                                      const std::function<at::Tensor()>& read)>& visit,
                             FileSystem* fs = nullptr);

}  // namespace deepspeed::checkpoint

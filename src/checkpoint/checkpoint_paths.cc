// DeepSpeed's checkpoint names (tags, per-rank files, `latest`) and the `latest` pointer itself.
#include <cstdio>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

std::string mp_part(int mp_rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "mp_rank_%02d", mp_rank);
  return buf;
}

// Parses a non-negative decimal at s[pos...]; advances pos. -1 when there is no digit.
int parse_int(const std::string& s, size_t& pos) {
  if (pos >= s.size() || s[pos] < '0' || s[pos] > '9') return -1;
  long long v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    v = v * 10 + (s[pos] - '0');
    if (v > 1000000000) return -1;
    ++pos;
  }
  return static_cast<int>(v);
}

bool consume(const std::string& s, size_t& pos, const std::string& word) {
  if (s.compare(pos, word.size(), word) != 0) return false;
  pos += word.size();
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Why `tag` cannot name a tag folder, or "" when it can: a plain file name (what save_checkpoint
// writes into `latest`), at most 255 bytes, no '/', no control character, not "." or "..".
std::string why_not_a_tag(const std::string& tag) {
  if (tag.empty()) return "it is empty";
  if (tag.size() > 255) return "it is longer than 255 bytes, the longest folder name";
  if (tag == "." || tag == "..") return "'.' and '..' are not folder names of their own";
  if (tag.find('/') != std::string::npos) return "it holds a '/'";
  for (const char c : tag)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "it holds a control character";
  return "";
}

}  // namespace

std::string default_tag(int64_t global_steps) {
  return "global_step" + std::to_string(global_steps);
}

std::string tag_dir(const std::string& dir, const std::string& tag) { return dir + "/" + tag; }

std::string latest_path(const std::string& dir) { return dir + "/latest"; }

std::string model_states_path(const std::string& dir, const std::string& tag, int mp_rank) {
  return tag_dir(dir, tag) + "/" + mp_part(mp_rank) + "_model_states.pt";
}

std::string expert_model_states_path(const std::string& dir, const std::string& tag, int64_t layer,
                                     int64_t expert, int mp_rank) {
  return tag_dir(dir, tag) + "/layer_" + std::to_string(layer) + "_expert_" + std::to_string(expert) + "_" +
         mp_part(mp_rank) + "_model_states.pt";
}

std::string zero_model_states_path(const std::string& dir, const std::string& tag, int dp_rank,
                                   int mp_rank) {
  return tag_dir(dir, tag) + "/zero_pp_rank_" + std::to_string(dp_rank) + "_" + mp_part(mp_rank) +
         "_model_states.pt";
}

std::string optim_states_path(const std::string& dir, const std::string& tag, int dp_rank,
                              int mp_rank) {
  return tag_dir(dir, tag) + "/zero_pp_rank_" + std::to_string(dp_rank) + "_" + mp_part(mp_rank) +
         "_optim_states.pt";
}

std::optional<CheckpointFileName> parse_checkpoint_file_name(const std::string& name) {
  CheckpointFileName out;
  size_t pos = 0;
  if (consume(name, pos, "zero_pp_rank_")) {
    out.dp_rank = parse_int(name, pos);
    if (out.dp_rank < 0 || !consume(name, pos, "_")) return std::nullopt;
  }
  if (!consume(name, pos, "mp_rank_")) return std::nullopt;
  out.mp_rank = parse_int(name, pos);
  if (out.mp_rank < 0) return std::nullopt;
  std::string rest = name.substr(pos);
  if (rest == "_model_states.pt") {
    out.kind = out.dp_rank < 0 ? CheckpointFileName::Kind::kModelStates
                               : CheckpointFileName::Kind::kZeroModelStates;
  } else if (rest == "_optim_states.pt" && out.dp_rank >= 0) {
    out.kind = CheckpointFileName::Kind::kOptimStates;
  } else {
    return std::nullopt;
  }
  return out;
}

std::vector<std::string> list_optim_states_files(const std::string& dir, const std::string& tag,
                                                 int mp_rank, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  std::vector<int> ranks;
  for (const std::string& name : fs->list_dir(tag_dir(dir, tag))) {
    auto parsed = parse_checkpoint_file_name(name);
    if (parsed && parsed->kind == CheckpointFileName::Kind::kOptimStates &&
        parsed->mp_rank == mp_rank) {
      ranks.push_back(parsed->dp_rank);
    }
  }
  DS_CHECK_T(CheckpointError, !ranks.empty(), "no zero_pp_rank_*_", mp_part(mp_rank),
             "_optim_states.pt in ", tag_dir(dir, tag));
  std::vector<bool> seen(ranks.size(), false);
  for (int r : ranks) {
    if (r < static_cast<int>(seen.size())) seen[r] = true;
  }
  std::vector<std::string> paths;
  for (size_t r = 0; r < seen.size(); ++r) {
    DS_CHECK_T(CheckpointError, seen[r], "checkpoint file ",
               optim_states_path(dir, tag, static_cast<int>(r), mp_rank), " is missing (found ",
               ranks.size(), " optimizer state files)");
    paths.push_back(optim_states_path(dir, tag, static_cast<int>(r), mp_rank));
  }
  return paths;
}

void write_latest(const std::string& dir, const std::string& tag, FileSystem* fs) {
  const std::string why = why_not_a_tag(tag);
  DS_CHECK(why.empty(), "checkpoint tag '", ::deepspeed::detail::printable(tag.substr(0, 80)),
           tag.size() > 80 ? "..." : "", "' cannot name a folder: ", why);
  write_file_atomic(latest_path(dir), tag.data(), tag.size(), fs);
}

std::string read_latest(const std::string& dir, FileSystem* fs, const std::string& file_name) {
  if (fs == nullptr) fs = default_file_system();
  std::string path = dir + "/" + file_name;
  DS_CHECK_T(CheckpointError, fs->file_exists(path), "no checkpoint in ", dir, ": ", path,
             " is missing (pass a tag explicitly)");
  std::vector<char> bytes = fs->read_file(path);
  std::string tag = trim(std::string(bytes.begin(), bytes.end()));
  DS_CHECK_T(CheckpointError, !tag.empty(), path, " is empty");
  // Garbage here would otherwise surface as "<dir>/<garbage>/... is missing", echoing raw bytes.
  const std::string why = why_not_a_tag(tag);
  DS_CHECK_T(CheckpointError, why.empty(), path, " does not hold a checkpoint tag (", why, "): '",
             ::deepspeed::detail::printable(tag.substr(0, 80)), tag.size() > 80 ? "..." : "",
             "'; it should name a tag folder of ", dir, " (pass a tag explicitly)");
  return tag;
}

std::string resolve_tag(const std::string& dir, const std::optional<std::string>& tag,
                        FileSystem* fs) {
  if (tag && !tag->empty()) return *tag;
  return read_latest(dir, fs);
}

std::pair<std::string, std::string> split_checkpoint_path(std::string path, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (fs->file_exists(latest_path(path))) return {path, ""};
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace deepspeed::checkpoint

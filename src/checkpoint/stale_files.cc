// remove_stale_files, begin_tag_save, end_tag_save: leftovers of saves whose process died
// (checkpoint.h). The rules lean to keeping: a file goes only when its writer is provably gone, and
// a tag directory only when it is provably incomplete and nothing points at it.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/writer_identity.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

constexpr const char* kMarkerPrefix = ".ds_saving.";

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// "<pid>" or "<pid>.<host>".
std::optional<Writer> parse_pid_host(const std::string& s) {
  const size_t dot = s.find('.');
  Writer w;
  const std::string pid = s.substr(0, dot);
  if (!all_digits(pid)) return std::nullopt;
  w.pid = std::stoi(pid);
  if (dot != std::string::npos) {
    w.host = s.substr(dot + 1);
    if (w.host.empty()) return std::nullopt;
  }
  return w;
}

// Complete: rank 0's model states and every rank's optimizer file. A file we cannot read counts as
// complete: only a tag we know to be partial is removed.
bool tag_complete(const std::string& dir, const std::string& tag, FileSystem* fs) {
  if (!fs->file_exists(model_states_path(dir, tag))) return false;
  std::vector<std::string> files;
  try {
    files = list_optim_states_files(dir, tag, 0, fs);
  } catch (const CheckpointError&) {
    return false;  // no optimizer file, or a rank missing
  }
  try {
    StateDict rank0 =
        load_state(files[0], LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
    auto count = rank0.find(kPartitionCountKey);
    return count == rank0.end() || !count->value().isInt() ||
           count->value().toInt() <= static_cast<int64_t>(files.size());
  } catch (const CheckpointError&) {
    return true;
  }
}

}  // namespace

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string host = buf;
  for (char& c : host)
    if (c == '/') c = '_';
  return host;
}

std::optional<Writer> temporary_writer(const std::string& name) {
  // The last ".tmp." followed by a pid: a host may contain dots, a pid may not.
  for (size_t pos = name.rfind(".tmp."); pos != std::string::npos && pos > 0;
       pos = name.rfind(".tmp.", pos - 1)) {
    if (auto w = parse_pid_host(name.substr(pos + 5))) return w;
  }
  return std::nullopt;
}

std::optional<Writer> marker_writer(const std::string& name) {
  const std::string prefix = kMarkerPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  auto w = parse_pid_host(name.substr(prefix.size()));
  if (!w || w->host.empty()) return std::nullopt;
  return w;
}

std::string marker_name() { return kMarkerPrefix + std::to_string(::getpid()) + "." + this_host(); }

bool writer_gone(const Writer& w, bool single_host) {
  if (w.pid <= 0) return false;
  if (w.host.empty() ? !single_host : w.host != this_host()) return false;
  return ::kill(w.pid, 0) != 0 && errno == ESRCH;
}

void begin_tag_save(const std::string& dir, const std::string& tag, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string tdir = tag_dir(dir, tag);
  fs->create_dirs(tdir);
  // Empty and not synced: a marker lost in a power cut leaves a tag uncleaned, never a wrong one
  // removed.
  std::unique_ptr<WritableFile> f = fs->new_writable_file(tdir + "/" + marker_name());
  f->close();
}

void end_tag_save(const std::string& dir, const std::string& tag, FileSystem* fs) noexcept {
  if (fs == nullptr) fs = default_file_system();
  try {
    fs->remove_file(tag_dir(dir, tag) + "/" + marker_name());
  } catch (...) {
    // The next save of this directory removes it once this process is gone.
  }
}

std::vector<std::string> remove_stale_files(const std::string& dir, const StaleFileOptions& options,
                                            FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  std::vector<std::string> removed;
  if (!fs->is_dir(dir)) return removed;
  std::string latest;
  if (fs->file_exists(latest_path(dir))) {
    try {
      latest = read_latest(dir, fs);
    } catch (const CheckpointError&) {
      // An empty `latest` names nothing; every other rule still protects complete tags.
    }
  }
  auto gone = [&](const std::optional<Writer>& w) {
    return w && writer_gone(*w, options.single_host);
  };
  for (const std::string& name : fs->list_dir(dir)) {
    const std::string path = dir + "/" + name;
    if (!fs->is_dir(path)) {
      if (gone(temporary_writer(name))) {
        fs->remove_file(path);
        removed.push_back(path);
      }
      continue;
    }
    std::vector<std::string> dead_markers, keep;
    bool live_marker = false, subdir = false;
    for (const std::string& inner : fs->list_dir(path)) {
      const std::string inner_path = path + "/" + inner;
      const bool is_dir = fs->is_dir(inner_path);
      if (!is_dir && gone(temporary_writer(inner))) {
        fs->remove_file(inner_path);
        removed.push_back(inner_path);
      } else if (auto m = is_dir ? std::nullopt : marker_writer(inner)) {
        (writer_gone(*m, options.single_host) ? dead_markers : keep).push_back(inner_path);
        live_marker |= !writer_gone(*m, options.single_host);
      } else {
        subdir |= is_dir;
        keep.push_back(inner_path);
      }
    }
    if (dead_markers.empty()) continue;
    const bool remove_tag = !live_marker && !subdir && name != latest && name != options.keep_tag &&
                            !tag_complete(dir, name, fs);
    for (const std::string& m : dead_markers) fs->remove_file(m);
    if (!remove_tag) {
      removed.insert(removed.end(), dead_markers.begin(), dead_markers.end());
      continue;
    }
    for (const std::string& f : keep) fs->remove_file(f);
    fs->remove_dir(path);
    removed.push_back(path);
  }
  return removed;
}

}  // namespace deepspeed::checkpoint

// Who wrote a temporary file or a saving marker, and whether that process still lives: the names
// carry "<pid>.<host>" (checkpoint.h: temporary_path, begin_tag_save), and remove_stale_files
// removes only what a gone process of this host left. Stateless; thread-safe.
#pragma once

#include <optional>
#include <string>

namespace deepspeed::checkpoint {

// This host's name as it appears in file names ('/' replaced).
std::string this_host();

struct Writer {
  int pid = 0;
  std::string host;  // empty: a name without a host (written by an older build)
};

// The writer of "<anything>.tmp.<pid>[.<host>]"; nullopt for other names.
std::optional<Writer> temporary_writer(const std::string& file_name);
// The writer of a saving marker ".ds_saving.<pid>.<host>"; nullopt for other names.
std::optional<Writer> marker_writer(const std::string& file_name);
// The marker name of this process.
std::string marker_name();

// True when `w` ran on this host (or, with no host in its name, when `single_host`) and its process
// no longer exists (kill(pid, 0) fails with ESRCH). A pid reused by a live process reads as alive.
bool writer_gone(const Writer& w, bool single_host);

}  // namespace deepspeed::checkpoint

// Hostfile parsing: MPI-style `hostname slots=N` lines, as DeepSpeed's runner reads them, with
// line-numbered errors (DeepSpeed only quotes the bad line).
#include <sys/stat.h>

#include <cctype>
#include <sstream>

#include "config/small_file.h"
#include "launcher/launcher.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

// Parses the "slots=N" token; false when it is not exactly that with N a positive decimal.
bool parse_slots_token(const std::string& token, int* slots) {
  static const std::string kKey = "slots=";
  if (token.compare(0, kKey.size(), kKey) != 0) return false;
  return parse_int(token.substr(kKey.size()), slots) && *slots >= 0;
}

}  // namespace

ResourcePool parse_hostfile(const std::string& text, const std::string& source) {
  ResourcePool pool;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = raw;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;

    const std::vector<std::string> tokens = split_whitespace(line);
    int slots = 0;
    DS_CHECK_T(LaunchError, tokens.size() == 2 && parse_slots_token(tokens[1], &slots), source, ":",
               line_no, ": expected 'hostname slots=N', got '", trim(raw), "'");
    DS_CHECK_T(LaunchError, is_valid_host_name(tokens[0]), source, ":", line_no, ": host '",
               tokens[0], "' is not a valid host name (", kHostNameRule, ")");
    DS_CHECK_T(LaunchError, slots > 0, source, ":", line_no, ": host '", tokens[0],
               "' has slots=0; every host needs at least one slot");
    for (const HostSlots& h : pool) {
      DS_CHECK_T(LaunchError, h.host != tokens[0], source, ":", line_no, ": host '", tokens[0],
                 "' is listed twice; give each host one line");
    }
    HostSlots entry;
    entry.host = tokens[0];
    for (int s = 0; s < slots; ++s) entry.slots.push_back(s);
    pool.push_back(entry);
  }
  DS_CHECK_T(LaunchError, !pool.empty(), source,
             ": hostfile lists no hosts; expected lines of 'hostname slots=N'");
  return pool;
}

std::optional<ResourcePool> fetch_hostfile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  DS_CHECK_T(LaunchError, S_ISREG(st.st_mode), "hostfile ", path, " is not a regular file");
  std::string text;
  const std::string why = config::read_small_file(path, &text);
  DS_CHECK_T(LaunchError, why.empty(), "cannot read hostfile ", path, ": ", why);
  return parse_hostfile(text, path);
}

}  // namespace deepspeed::launcher

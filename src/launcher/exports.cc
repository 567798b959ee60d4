// See exports.h.
#include "launcher/exports.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "config/small_file.h"
#include "deepspeed/error.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool is_file(const std::string& path, struct stat* st) {
  return ::stat(path.c_str(), st) == 0 && S_ISREG(st->st_mode);
}

}  // namespace

bool is_exported_name(const std::string& name) {
  for (const std::string prefix : kExportPrefixes) {
    const bool whole = prefix.rfind("LD_", 0) == 0;
    if (whole ? name == prefix : name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

void set_env_var(EnvVars& vars, const std::string& name, const std::string& value) {
  for (auto& [n, v] : vars) {
    if (n == name) {
      v = value;
      return;
    }
  }
  vars.emplace_back(name, value);
}

EnvVars parse_env_file(const std::string& text, const std::string& source) {
  EnvVars vars;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t eq = t.find('=');
    DS_CHECK_T(LaunchError, eq != std::string::npos, source, ":", lineno,
               ": expected NAME=VALUE, got '", t, "'");
    const std::string name = trim(t.substr(0, eq));
    DS_CHECK_T(LaunchError, is_identifier(name), source, ":", lineno, ": '", name,
               "' is not a valid environment variable name");
    std::string value = trim(t.substr(eq + 1));
    // DeepSpeed pastes the value into a shell command, so users quote values with spaces; the
    // value is quoted here anyway, so one level of matching quotes is the user's, not the value's.
    if (value.size() >= 2 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0]) {
      value = value.substr(1, value.size() - 2);
    }
    set_env_var(vars, name, value);
  }
  return vars;
}

std::vector<std::string> env_file_paths() {
  const char* name_env = std::getenv("DS_ENV_FILE");
  const std::string name = name_env != nullptr && *name_env ? name_env : ".deepspeed_env";
  std::vector<std::string> candidates;
  if (name[0] == '/') {
    candidates.push_back(name);
  } else {
    const char* home = std::getenv("HOME");
    if (home != nullptr && *home) candidates.push_back(std::string(home) + "/" + name);
    candidates.push_back(name);
  }
  std::vector<std::string> paths;
  struct stat first = {};
  for (const std::string& c : candidates) {
    struct stat st;
    if (!is_file(c, &st)) continue;
    if (!paths.empty() && st.st_dev == first.st_dev && st.st_ino == first.st_ino) continue;
    if (paths.empty()) first = st;
    paths.push_back(c);
  }
  return paths;
}

EnvVars collect_exports(const std::vector<std::string>& environ_kv,
                        const std::vector<std::string>& env_files) {
  EnvVars vars;
  for (const std::string& kv : environ_kv) {
    const size_t eq = kv.find('=');
    // A name no shell can export (env 'DS_A;B=1' ...) would be a command on every host: skip it.
    if (eq == std::string::npos || !is_exported_name(kv.substr(0, eq)) ||
        !is_identifier(kv.substr(0, eq))) {
      continue;
    }
    set_env_var(vars, kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const std::string& path : env_files) {
    std::string text;
    const std::string why = config::read_small_file(path, &text);
    DS_CHECK_T(LaunchError, why.empty(), "cannot read ", path, ": ", why);
    for (const auto& [name, value] : parse_env_file(text, path))
      set_env_var(vars, name, value);
  }
  return vars;
}

}  // namespace deepspeed::launcher

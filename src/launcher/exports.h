// The environment a multi-node run hands to every rank on every node, as DeepSpeed's runner does:
// the launcher's own variables whose names start with one of kExportPrefixes (DeepSpeed exports
// NCCL*, PYTHON*, MV2*, UCX*; a C++ program needs the list below instead), then the lines of
// `.deepspeed_env` files (NAME=VALUE; `#` comments and blank lines skipped; one level of matching
// quotes around VALUE removed, as a shell would in DeepSpeed's runner), read from the home
// directory and then the current directory, later values replacing earlier ones. $DS_ENV_FILE
// renames the file (an absolute path is used as is). Pure functions except env_file_paths();
// thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace deepspeed::launcher {

// Name prefixes exported to remote ranks. LD_LIBRARY_PATH and LD_PRELOAD are matched whole.
inline constexpr const char* kExportPrefixes[] = {
    "NCCL_",     "GLOO_",     "UCX_", "MV2_",   "OMP_",       "KMP_",
    "MKL_",      "OPENBLAS_", "DS_",  "TORCH_", "DEEPSPEED_", "LD_LIBRARY_PATH",
    "LD_PRELOAD"};

// Ordered NAME -> VALUE pairs with unique names.
using EnvVars = std::vector<std::pair<std::string, std::string>>;

bool is_exported_name(const std::string& name);

// Sets `name` to `value`, replacing an earlier value in place (so the first setting keeps its
// position: commands come out in a stable order).
void set_env_var(EnvVars& vars, const std::string& name, const std::string& value);

// Parses a .deepspeed_env file. A line without '=' or with a name that is not a shell identifier
// throws LaunchError naming `source`:line.
EnvVars parse_env_file(const std::string& text, const std::string& source);

// The .deepspeed_env files to read, in order: $HOME/<name> and ./<name> (one entry when both are
// the same file), <name> from $DS_ENV_FILE or ".deepspeed_env"; only files that exist.
std::vector<std::string> env_file_paths();

// Exports for a run: the matching NAME=VALUE entries of `environ_kv` (names that are not shell
// identifiers skipped), then every file's lines.
EnvVars collect_exports(const std::vector<std::string>& environ_kv,
                        const std::vector<std::string>& env_files);

}  // namespace deepspeed::launcher

// The exact commands each multi-node backend runs (golden-tested in
// tests/launcher/multinode_commands_test.cc).
#include <algorithm>
#include <sstream>

#include "launcher/launcher.h"
#include "launcher/text_util.h"
#include "launcher/world_info.h"

namespace deepspeed::launcher {
namespace {

std::string host_list(const ResourcePool& pool) {
  std::string s;
  for (const HostSlots& h : pool) s += (s.empty() ? "" : ",") + h.host;
  return s;
}

// Every export, MASTER_ADDR and MASTER_PORT first (the ranks of mpirun/srun read them there).
std::vector<std::pair<std::string, std::string>> rank_exports(const MultiNodeLaunch& m) {
  std::vector<std::pair<std::string, std::string>> all = {
      {"MASTER_ADDR", m.master_addr}, {"MASTER_PORT", std::to_string(m.master_port)}};
  for (const auto& kv : m.exports) {
    if (kv.first != "MASTER_ADDR" && kv.first != "MASTER_PORT") all.push_back(kv);
  }
  return all;
}

void append(std::vector<std::string>& to, const std::vector<std::string>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// node_command() around the node rank: what comes before it and after it.
std::pair<std::string, std::string> node_command_parts(const MultiNodeLaunch& m) {
  DS_CHECK_T(LaunchError, !m.master_addr.empty(), "node_command: the master address is not set");
  std::ostringstream head;
  // `exec env NAME=value ...` rather than `export`: it also works when the login shell is csh.
  head << "cd " << sh_quote(m.cwd) << " && exec ";
  if (!m.exports.empty()) {
    head << "env ";
    for (const auto& [name, value] : m.exports) head << name << "=" << sh_quote(value) << " ";
  }
  head << sh_quote(m.launcher_exe) << " " << sh_quote("--world_info=" + encode_world_info(m.pool))
       << " --node_rank=";
  std::ostringstream tail;
  tail << " " << sh_quote("--master_addr=" + m.master_addr) << " --master_port=" << m.master_port
       << " --stop_on_stdin_eof";
  for (const std::string& f : m.node_flags) tail << " " << sh_quote(f);
  tail << " " << sh_quote(m.program);
  for (const std::string& a : m.program_args) tail << " " << sh_quote(a);
  return {head.str(), tail.str()};
}

// pdsh expands %h, %u, %n and %% in the command it runs: a literal % is written %%.
std::string escape_percent(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

}  // namespace

std::string node_command(const MultiNodeLaunch& m, const std::string& node_rank) {
  const auto [head, tail] = node_command_parts(m);
  return head + node_rank + tail;
}

std::vector<std::string> pdsh_argv(const MultiNodeLaunch& m) {
  const auto [head, tail] = node_command_parts(m);
  // Every host starts at once: with a fanout below the host count, the first hosts' ranks would
  // wait forever for hosts pdsh has not started.
  const size_t fanout = std::max<size_t>(1024, m.pool.size());
  std::vector<std::string> argv = {"pdsh",           "-S", "-f", std::to_string(fanout), "-w",
                                   host_list(m.pool)};
  append(argv, m.launcher_args);
  argv.push_back(escape_percent(head) + "%n" + escape_percent(tail));
  return argv;
}

std::vector<std::string> ssh_argv(const MultiNodeLaunch& m, int node) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  if (m.ssh_port > 0) append(argv, {"-p", std::to_string(m.ssh_port)});
  append(argv, m.launcher_args);
  argv.push_back(m.pool.at(static_cast<size_t>(node)).host);
  argv.push_back(node_command(m, std::to_string(node)));
  return argv;
}

std::string mpi_hostfile(const ResourcePool& pool) {
  std::string text;
  for (const HostSlots& h : pool)
    text += h.host + " slots=" + std::to_string(h.slots.size()) + "\n";
  return text;
}

std::vector<std::string> mpirun_argv(const MultiNodeLaunch& m, const std::string& hostfile_path) {
  std::vector<std::string> argv = {"mpirun",    "-n",          std::to_string(world_size(m.pool)),
                                   "-hostfile", hostfile_path, "-wdir",
                                   m.cwd};
  // mpirun starts its daemons over ssh; --ssh_port must reach them too.
  if (m.ssh_port > 0) append(argv, {"--mca", "plm_rsh_args", "-p " + std::to_string(m.ssh_port)});
  append(argv, m.launcher_args);
  for (const auto& [name, value] : rank_exports(m)) append(argv, {"-x", name + "=" + value});
  argv.push_back(m.program);
  append(argv, m.program_args);
  return argv;
}

std::vector<std::string> srun_argv(const MultiNodeLaunch& m) {
  std::vector<std::string> argv = {"srun",
                                   "-n",
                                   std::to_string(world_size(m.pool)),
                                   "--nodes",
                                   std::to_string(m.pool.size()),
                                   "--ntasks-per-node",
                                   std::to_string(m.pool.at(0).slots.size()),
                                   "--nodelist",
                                   host_list(m.pool),
                                   "--chdir",
                                   m.cwd,
                                   "--kill-on-bad-exit=1"};
  if (!m.comment.empty()) append(argv, {"--comment", m.comment});
  if (!m.account.empty()) append(argv, {"--account", m.account});
  append(argv, m.launcher_args);
  std::string exports = "--export=ALL";
  for (const auto& [name, value] : rank_exports(m)) {
    // srun splits --export at commas; a value holding one cannot be passed.
    DS_CHECK_T(LaunchError, value.find(',') == std::string::npos, "--launcher slurm cannot export ",
               name, ": its value contains a comma, which srun's --export would split ('", value,
               "')");
    exports += "," + name + "=" + value;
  }
  argv.push_back(exports);
  argv.push_back(m.program);
  append(argv, m.program_args);
  return argv;
}

}  // namespace deepspeed::launcher

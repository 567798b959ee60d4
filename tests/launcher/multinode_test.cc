// The multi-node runner's pure parts: --world_info, shell quoting, exports, the plan's checks and
// the exact commands each backend runs (golden strings).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "launcher/launcher.h"
#include "launcher/exports.h"
#include "launcher/text_util.h"
#include "launcher/world_info.h"

namespace deepspeed::launcher {
namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

// What /bin/sh makes of `command`: each word it passes to printf, one per line.
std::string through_shell(const std::string& words) {
  const std::string cmd = "/bin/sh -c " + sh_quote("printf '%s\\n' " + words);
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(WorldInfo, RoundTripKeepsHostOrder) {
  const ResourcePool pool{{"zeta", {0, 1}}, {"alpha", {3}}, {"10.0.0.7", {0, 2, 5}}};
  const std::string enc = encode_world_info(pool);
  EXPECT_EQ(
      enc.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="),
      std::string::npos);
  EXPECT_EQ(decode_world_info(enc), pool);
  // DeepSpeed's own encoding of {"a": [0, 1]} (Python's json.dumps, then urlsafe base64).
  EXPECT_EQ(decode_world_info("eyJhIjogWzAsIDFdfQ=="), (ResourcePool{{"a", {0, 1}}}));
}

TEST(WorldInfo, MalformedIsOneLineError) {
  EXPECT_EQ(error_of([] { decode_world_info("e30*"); }),
            "--world_info: '*' is not a base64 character");
  EXPECT_EQ(error_of([] { decode_world_info("e30="); }),  // {}
            "--world_info must encode a non-empty JSON object {\"host\": [slots]}");
  EXPECT_EQ(error_of([] { decode_world_info("eyJhIjogW119"); }),  // {"a": []}
            "--world_info: host 'a' needs a non-empty list of slots");
  EXPECT_EQ(error_of([] { decode_world_info("eyJhIjogWzEsIDFdfQ=="); }),  // {"a": [1, 1]}
            "--world_info: host 'a' lists slot 1 twice");
  EXPECT_NE(error_of([] { decode_world_info("bm90IGpzb24="); }).find("not base64 of a JSON"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              decode_world_info(encode_world_info({{"-oProxyCommand=x", {0}}}));
            }),
            "--world_info: '-oProxyCommand=x' is not a valid host name (host names may hold "
            "letters, digits and . - _ : @ and must not start with '-')");
}

TEST(ShellWords, QuotedValuesSurviveAShell) {
  const std::vector<std::string> nasty = {"plain",     "a b",     "it's",  "$HOME",
                                          "`id`",      "a;b|c&d", "\"q\"", "back\\slash",
                                          "new\nline", "",        "%n %%", "*"};
  std::string words;
  std::string expected;
  for (const std::string& w : nasty) {
    words += sh_quote(w) + " ";
    expected += w + "\n";
  }
  EXPECT_EQ(through_shell(words), expected);
}

TEST(ShellWords, SplitLikeAShell) {
  EXPECT_EQ(split_shell_words("  -x FOO  --mca 'a b' \"c \\\"d\\\"\" e\\ f ''", "--launcher_args"),
            (std::vector<std::string>{"-x", "FOO", "--mca", "a b", "c \"d\"", "e f", ""}));
  EXPECT_EQ(split_shell_words("", "x"), std::vector<std::string>{});
  EXPECT_EQ(error_of([] { split_shell_words("-x 'open", "--launcher_args"); }),
            "--launcher_args: unterminated ' in '-x 'open'");
}

TEST(Exports, PrefixesFromTheEnvironmentThenFiles) {
  EXPECT_TRUE(is_exported_name("NCCL_DEBUG"));
  EXPECT_TRUE(is_exported_name("GLOO_SOCKET_IFNAME"));
  EXPECT_TRUE(is_exported_name("OMP_NUM_THREADS"));
  EXPECT_TRUE(is_exported_name("LD_LIBRARY_PATH"));
  EXPECT_FALSE(is_exported_name("LD_LIBRARY_PATHS"));
  EXPECT_FALSE(is_exported_name("HOME"));
  EXPECT_FALSE(is_exported_name("RANK"));

  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/ds_env_test";
  std::ofstream(file) << "# comment\n\n  FOO = bar baz \nNCCL_DEBUG=WARN\nEMPTY=\n";
  const EnvVars got =
      collect_exports({"HOME=/root", "NCCL_DEBUG=INFO", "OMP_NUM_THREADS=4", "junk"}, {file});
  EXPECT_EQ(
      got,
      (EnvVars{
          {"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "4"}, {"FOO", "bar baz"}, {"EMPTY", ""}}));
  std::remove(file.c_str());
}

TEST(Exports, BadEnvFileLinesNameFileAndLine) {
  EXPECT_EQ(error_of([] { parse_env_file("A=1\nnot a pair\n", "/h/.deepspeed_env"); }),
            "/h/.deepspeed_env:2: expected NAME=VALUE, got 'not a pair'");
  EXPECT_EQ(error_of([] { parse_env_file("1X=2\n", "f"); }),
            "f:1: '1X' is not a valid environment variable name");
}

TEST(Exports, EnvFilesFromHomeAndHereOrDsEnvFile) {
  const std::string home = ::testing::TempDir() + "/ds_env_home";
  std::system(("rm -rf " + home + " && mkdir -p " + home).c_str());
  std::ofstream(home + "/.deepspeed_env") << "A=1\n";
  const char* old_home = std::getenv("HOME");
  const std::optional<std::string> saved =
      old_home != nullptr ? std::optional<std::string>(old_home) : std::nullopt;
  // ./.deepspeed_env would count too: run from a directory that has none.
  char old_cwd[4096];
  ASSERT_NE(::getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  const std::string here = home + "/cwd";
  std::system(("mkdir -p " + here).c_str());
  ASSERT_EQ(::chdir(here.c_str()), 0);
  setenv("HOME", home.c_str(), 1);
  EXPECT_EQ(env_file_paths(), std::vector<std::string>{home + "/.deepspeed_env"});
  setenv("DS_ENV_FILE", (home + "/other").c_str(), 1);
  EXPECT_EQ(env_file_paths(), std::vector<std::string>{});  // absolute name, not there
  std::ofstream(home + "/other") << "B=2\n";
  EXPECT_EQ(env_file_paths(), std::vector<std::string>{home + "/other"});
  unsetenv("DS_ENV_FILE");
  if (saved) {
    setenv("HOME", saved->c_str(), 1);
  } else {
    unsetenv("HOME");
  }
  ASSERT_EQ(::chdir(old_cwd), 0);
}

MultiNodeLaunch example(const std::string& backend) {
  MultiNodeLaunch m;
  m.backend = backend;
  m.pool = {{"node-a", {0, 1}}, {"node-b", {0, 1}}};
  m.master_addr = "10.0.0.1";
  m.master_port = 29600;
  m.exports = {{"NCCL_DEBUG", "INFO"}, {"DS_X", "it's 50%"}};
  m.launcher_exe = "/opt/ds/bin/deepspeed";
  m.cwd = "/work/my run";
  m.node_flags = {"--no_local_rank"};
  m.program = "bin/train";
  m.program_args = {"--config", "a b.json"};
  return m;
}

// {"node-a": [0, 1], "node-b": [0, 1]}
const std::string kWorld = encode_world_info({{"node-a", {0, 1}}, {"node-b", {0, 1}}});

TEST(MultiNodeCommands, NodeCommandForARemoteShell) {
  EXPECT_EQ(node_command(example("ssh"), "1"),
            "cd '/work/my run' && exec env NCCL_DEBUG='INFO' DS_X='it'\\''s 50%' "
            "'/opt/ds/bin/deepspeed' '--world_info=" +
                kWorld +
                "' --node_rank=1 '--master_addr=10.0.0.1' --master_port=29600 "
                "--stop_on_stdin_eof '--no_local_rank' 'bin/train' '--config' 'a b.json'");
}

TEST(MultiNodeCommands, PdshEscapesItsPercentExpansion) {
  MultiNodeLaunch m = example("pdsh");
  m.launcher_args = {"-u", "30"};
  const std::vector<std::string> argv = pdsh_argv(m);
  ASSERT_EQ(argv.size(), 9u);
  EXPECT_EQ(
      std::vector<std::string>(argv.begin(), argv.begin() + 8),
      (std::vector<std::string>{"pdsh", "-S", "-f", "1024", "-w", "node-a,node-b", "-u", "30"}));
  EXPECT_EQ(argv[8],
            "cd '/work/my run' && exec env NCCL_DEBUG='INFO' DS_X='it'\\''s 50%%' "
            "'/opt/ds/bin/deepspeed' '--world_info=" +
                kWorld +
                "' --node_rank=%n '--master_addr=10.0.0.1' --master_port=29600 "
                "--stop_on_stdin_eof '--no_local_rank' 'bin/train' '--config' "
                "'a b.json'");
}

TEST(MultiNodeCommands, PdshKeepsUserBytesAndStartsEveryHostAtOnce) {
  MultiNodeLaunch m = example("pdsh");
  m.program_args = {std::string("a\x01b"), "%n"};  // nothing in a value becomes pdsh's node rank
  const std::string cmd = pdsh_argv(m).back();
  EXPECT_NE(cmd.find(std::string("'a\x01b' '%%n'")), std::string::npos) << cmd;
  for (int i = 0; i < 1500; ++i) m.pool.push_back({"h" + std::to_string(i), {0}});
  EXPECT_EQ(pdsh_argv(m)[3], "1502");  // fanout >= hosts: later hosts must not wait for earlier
}

TEST(MultiNodeCommands, SshOneCommandPerHost) {
  MultiNodeLaunch m = example("ssh");
  m.ssh_port = 2200;
  m.launcher_args = {"-i", "/keys/id"};
  EXPECT_EQ(ssh_argv(m, 1),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-p", "2200", "-i", "/keys/id",
                                      "node-b", node_command(m, "1")}));
}

TEST(MultiNodeCommands, MpirunGolden) {
  MultiNodeLaunch m = example("openmpi");
  m.node_flags.clear();
  m.launcher_args = {"--mca", "btl_tcp_if_include", "eth0"};
  EXPECT_EQ(mpi_hostfile(m.pool), "node-a slots=2\nnode-b slots=2\n");
  EXPECT_EQ(mpirun_argv(m, "/tmp/hf"), (std::vector<std::string>{"mpirun",
                                                                 "-n",
                                                                 "4",
                                                                 "-hostfile",
                                                                 "/tmp/hf",
                                                                 "-wdir",
                                                                 "/work/my run",
                                                                 "--mca",
                                                                 "btl_tcp_if_include",
                                                                 "eth0",
                                                                 "-x",
                                                                 "MASTER_ADDR=10.0.0.1",
                                                                 "-x",
                                                                 "MASTER_PORT=29600",
                                                                 "-x",
                                                                 "NCCL_DEBUG=INFO",
                                                                 "-x",
                                                                 "DS_X=it's 50%",
                                                                 "bin/train",
                                                                 "--config",
                                                                 "a b.json"}));
}

TEST(MultiNodeCommands, MpirunDaemonsUseTheSshPort) {
  MultiNodeLaunch m = example("openmpi");
  m.ssh_port = 2200;
  const std::vector<std::string> argv = mpirun_argv(m, "/tmp/hf");
  EXPECT_EQ(std::vector<std::string>(argv.begin() + 7, argv.begin() + 10),
            (std::vector<std::string>{"--mca", "plm_rsh_args", "-p 2200"}));
}

TEST(MultiNodeCommands, SrunGolden) {
  MultiNodeLaunch m = example("slurm");
  m.node_flags.clear();
  m.comment = "my job";
  m.account = "proj";
  EXPECT_EQ(srun_argv(m),
            (std::vector<std::string>{
                "srun",
                "-n",
                "4",
                "--nodes",
                "2",
                "--ntasks-per-node",
                "2",
                "--nodelist",
                "node-a,node-b",
                "--chdir",
                "/work/my run",
                "--kill-on-bad-exit=1",
                "--comment",
                "my job",
                "--account",
                "proj",
                "--export=ALL,MASTER_ADDR=10.0.0.1,MASTER_PORT=29600,NCCL_DEBUG=INFO,DS_X=it's 50%",
                "bin/train",
                "--config",
                "a b.json"}));
  m.exports.push_back({"GLOO_SOCKET_IFNAME", "eth0,eth1"});
  EXPECT_EQ(error_of([&] { srun_argv(m); }),
            "--launcher slurm cannot export GLOO_SOCKET_IFNAME: its value contains a comma, which "
            "srun's --export would split ('eth0,eth1')");
}

LauncherArgs args_with(const std::string& backend) {
  LauncherArgs a;
  a.launcher = backend;
  a.user_script = "prog";
  a.user_args = {"x"};
  return a;
}

TEST(MultiNodePlan, BackendsAndTheirChecks) {
  const ResourcePool pool{{"h1", {0, 1}}, {"h2", {0, 1}}, {"h3", {0, 1, 2}}};
  LauncherArgs a = args_with("ssh");
  a.include = "h1@h3:0,2";
  a.no_local_rank = true;
  a.bind_cores_to_rank = true;
  a.bind_core_list = "0-3";
  a.launcher_args = "-o 'ProxyJump bastion'";
  MultiNodeLaunch m = plan_multinode(a, pool);
  EXPECT_EQ(m.backend, "ssh");
  EXPECT_EQ(m.pool, (ResourcePool{{"h1", {0, 1}}, {"h3", {0, 2}}}));
  EXPECT_EQ(m.node_flags, (std::vector<std::string>{"--no_local_rank", "--bind_cores_to_rank",
                                                    "--bind_core_list=0-3"}));
  EXPECT_EQ(m.launcher_args, (std::vector<std::string>{"-o", "ProxyJump bastion"}));
  EXPECT_EQ(m.program_args, std::vector<std::string>{"x"});
  EXPECT_TRUE(m.check_ssh);
  EXPECT_EQ(m.launcher_exe.front(), '/');

  EXPECT_EQ(
      error_of([&] { plan_multinode(args_with("mvapich"), pool); }),
      "--launcher mvapich is not supported by deepspeed-cpp; use pdsh, ssh, openmpi or slurm");
  LauncherArgs mpi = args_with("openmpi");
  mpi.include = "h3:0,2";
  EXPECT_EQ(error_of([&] { plan_multinode(mpi, pool); }),
            "--launcher openmpi starts N ranks per host and cannot use particular slots (host 'h3' "
            "selects slots other than 0..1); select whole hosts or use --num_gpus, or use "
            "--launcher pdsh/ssh");
  mpi.include = "";
  mpi.bind_cores_to_rank = true;
  EXPECT_NE(error_of([&] { plan_multinode(mpi, pool); }).find("need --launcher pdsh or ssh"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { plan_multinode(args_with("slurm"), pool); }),
            "--launcher slurm starts the same number of ranks on every host, but 'h3' has 3 slots "
            "and 'h1' has 2; use --num_gpus N");
  LauncherArgs slurm = args_with("slurm");
  slurm.num_gpus = 2;
  slurm.comment = "c";
  EXPECT_EQ(plan_multinode(slurm, pool).comment, "c");
  LauncherArgs commented = args_with("pdsh");
  commented.account = "acct";
  EXPECT_EQ(error_of([&] { plan_multinode(commented, pool); }),
            "--comment and --account are passed to srun; they need --launcher slurm");
}

TEST(MultiNodePlan, NodeLauncherTakesItsShareOfTheWorld) {
  // What a node-local launcher started by the runner does with --world_info.
  LauncherArgs a = args_with("");
  a.world_info = encode_world_info({{"h1", {0, 1}}, {"h2", {0, 1, 2}}});
  a.node_rank = 1;
  a.master_addr = "10.0.0.1";
  a.stop_on_stdin_eof = true;
  EXPECT_FALSE(needs_multinode(a, std::nullopt));
  const LocalLaunch l = plan_launch(a, std::nullopt);
  EXPECT_EQ(l.world_size, 5);
  EXPECT_EQ(l.first_rank, 2);
  EXPECT_EQ(l.slots, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(l.num_nodes, 2);
  EXPECT_TRUE(l.stop_on_stdin_eof);
  a.node_rank = 2;
  EXPECT_EQ(error_of([&] { plan_launch(a, std::nullopt); }),
            "--world_info needs --node_rank in [0, 2), got 2");
  a.node_rank = 0;
  a.num_gpus = 1;
  EXPECT_NE(error_of([&] { plan_launch(a, std::nullopt); }).find("already selects the resources"),
            std::string::npos);
}

}  // namespace
}  // namespace deepspeed::launcher

// A rank for the launcher's integration tests: a plain executable (no LibTorch) whose behaviour is
// chosen by flags.
//   --local_rank=N      (inserted by the launcher) must equal $LOCAL_RANK, else exit 11
//   --check-env         print the distributed variables; exit 10 if they are inconsistent
//   --print-args        print every argument after the program name
//   --tail              end stdout and stderr with a line that has no newline
//   --pid-dir DIR       write DIR/<RANK>.pid (atomically)
//   --spawn-child       fork a child that sleeps forever and record it as DIR/<RANK>.child.pid
//   --ignore-term       ignore SIGTERM
//   --exit-rank R CODE  rank R waits until every local rank wrote its pid file, then exits with
//   CODE
//   --signal-rank R SIG rank R waits likewise, then kills itself with SIG
//   --print-affinity    print the cores this rank may run on and $OMP_NUM_THREADS
//   --hang              finally wait for a signal forever
//   --print-env NAME    print "env NAME=<value>" ("(unset)" when unset)
//   --word W            ignored: carries an argument whose quoting a test checks
//   --wait-world        --exit-rank/--signal-rank wait for WORLD_SIZE pid files (ranks on
//                       several "hosts" sharing DIR), not LOCAL_WORLD_SIZE
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

void write_pid_file(const std::string& dir, const std::string& name, pid_t pid) {
  const std::string tmp = dir + "/." + name + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(20);
  std::fprintf(f, "%d\n", static_cast<int>(pid));
  std::fclose(f);
  if (std::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) std::exit(21);
}

int count_rank_pid_files(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name[0] != '.' && name.find(".child") == std::string::npos && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".pid") == 0) {
        ++n;
      }
    }
    closedir(d);
  }
  return n;
}

// Waits (up to 30 s) until every local rank has recorded its pid, so the test knows all the pids it
// must check.
bool wait_world = false;

void wait_for_all_pid_files(const std::string& dir) {
  const int want = env_int(wait_world ? "WORLD_SIZE" : "LOCAL_WORLD_SIZE");
  for (int i = 0; i < 3000 && count_rank_pid_files(dir) < want; ++i) usleep(10000);
}

bool check_env() {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const int local_rank = env_int("LOCAL_RANK");
  const int local_world = env_int("LOCAL_WORLD_SIZE");
  const int group_rank = env_int("GROUP_RANK");
  const char* addr = std::getenv("MASTER_ADDR");
  const int port = env_int("MASTER_PORT");
  std::printf(
      "env RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d LOCAL_WORLD_SIZE=%d GROUP_RANK=%d NODE_RANK=%d "
      "CROSS_RANK=%d CROSS_SIZE=%d MASTER_ADDR=%s MASTER_PORT=%d\n",
      rank, world, local_rank, local_world, group_rank, env_int("NODE_RANK"), env_int("CROSS_RANK"),
      env_int("CROSS_SIZE"), addr ? addr : "(unset)", port);
  std::fprintf(stderr, "stderr line from rank %d\n", rank);
  return rank >= 0 && rank < world && local_rank >= 0 && local_rank < local_world &&
         local_world <= world && env_int("LOCAL_SIZE") == local_world && group_rank >= 0 &&
         env_int("NODE_RANK") == group_rank && env_int("CROSS_RANK") == group_rank &&
         group_rank < env_int("CROSS_SIZE") &&
         env_int("GROUP_WORLD_SIZE") == env_int("CROSS_SIZE") &&
         // Uniform nodes: this rank's global index follows from its node and local index.
         rank == group_rank * local_world + local_rank && addr != nullptr && port > 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const int rank = env_int("RANK");
  size_t i = 0;
  if (!args.empty() && args[0].rfind("--local_rank=", 0) == 0) {
    if (std::atoi(args[0].c_str() + 13) != env_int("LOCAL_RANK")) return 11;
    i = 1;
  }
  std::string pid_dir;
  bool hang = false;
  int exit_rank = -1, exit_code = 0, signal_rank = -1, signal_number = 0;
  bool tail = false;
  bool spawn_child = false;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--check-env") {
      if (!check_env()) return 10;
    } else if (a == "--print-args") {
      for (size_t k = 0; k < args.size(); ++k) std::printf("arg[%zu]=%s\n", k, args[k].c_str());
    } else if (a == "--tail") {
      tail = true;
    } else if (a == "--pid-dir" && i + 1 < args.size()) {
      pid_dir = args[++i];
    } else if (a == "--spawn-child") {
      spawn_child = true;
    } else if (a == "--ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (a == "--exit-rank" && i + 2 < args.size()) {
      exit_rank = std::atoi(args[++i].c_str());
      exit_code = std::atoi(args[++i].c_str());
    } else if (a == "--signal-rank" && i + 2 < args.size()) {
      signal_rank = std::atoi(args[++i].c_str());
      signal_number = std::atoi(args[++i].c_str());
    } else if (a == "--print-affinity") {
      cpu_set_t set;
      CPU_ZERO(&set);
      sched_getaffinity(0, sizeof(set), &set);
      std::string cores;
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) cores += (cores.empty() ? "" : ",") + std::to_string(c);
      }
      const char* omp = std::getenv("OMP_NUM_THREADS");
      std::printf("affinity=%s OMP_NUM_THREADS=%s\n", cores.c_str(), omp ? omp : "(unset)");
    } else if (a == "--hang") {
      hang = true;
    } else if (a == "--print-env" && i + 1 < args.size()) {
      const char* v = std::getenv(args[++i].c_str());
      std::printf("env %s=%s\n", args[i].c_str(), v != nullptr ? v : "(unset)");
    } else if (a == "--word" && i + 1 < args.size()) {
      ++i;
    } else if (a == "--wait-world") {
      wait_world = true;
    } else {
      std::fprintf(stderr, "rank_program: unknown argument '%s'\n", a.c_str());
      return 12;
    }
  }
  std::fflush(stdout);
  if (spawn_child && !pid_dir.empty()) {
    const pid_t child = fork();
    if (child == 0) {
      for (;;) pause();
    }
    write_pid_file(pid_dir, std::to_string(rank) + ".child.pid", child);
  }
  if (!pid_dir.empty()) write_pid_file(pid_dir, std::to_string(rank) + ".pid", getpid());
  if (tail) {
    std::printf("tail-%d", rank);
    std::fprintf(stderr, "errtail-%d", rank);
    std::fflush(stdout);
  }
  if (rank == exit_rank) {
    wait_for_all_pid_files(pid_dir);
    return exit_code;
  }
  if (rank == signal_rank) {
    wait_for_all_pid_files(pid_dir);
    signal(signal_number, SIG_DFL);
    raise(signal_number);
  }
  if (hang || exit_rank >= 0 || signal_rank >= 0) {
    for (;;) pause();
  }
  return 0;
}

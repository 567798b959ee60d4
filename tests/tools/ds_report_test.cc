// ds_report, black box: the binary is run as users run it; every section is there with plausible
// values, --path probes the directory it names, and bad command lines fail with one line and exit
// code 2.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/csrc/api/include/torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "temp_dir.h"
#include "tool_process.h"

namespace {

using Sections = std::map<std::string, std::map<std::string, std::string>>;

// "Title:" lines open a section; "name ..... value" lines fill it; indented lines (continuations,
// kernel rows) and rules are skipped.
Sections parse_report(const std::string& text) {
  static const std::regex kLine(R"(^(\S.*?) \.+ (.*)$)");
  Sections sections;
  std::string current;
  for (const auto& line : ds_test::split_lines(text)) {
    std::smatch m;
    if (line.empty() || line[0] == ' ' || line[0] == '-') continue;
    if (std::regex_match(line, m, kLine)) {
      sections[current][m[1]] = m[2];
    } else if (line.back() == ':') {
      current = line.substr(0, line.size() - 1);
      sections[current];
    }
  }
  return sections;
}

std::string value(const Sections& s, const std::string& section, const std::string& name) {
  auto sec = s.find(section);
  if (sec == s.end()) return "<no section " + section + ">";
  auto it = sec->second.find(name);
  return it == sec->second.end() ? "<no line " + name + ">" : it->second;
}

int leading_int(const std::string& text) { return std::atoi(text.c_str()); }

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

ds_test::ToolResult report(const std::vector<std::string>& args = {},
                           const ds_test::EnvChanges& env = {}) {
  std::vector<std::string> argv = {DS_REPORT_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return ds_test::run_tool(argv, env);
}

const char* const kSections[] = {
    "DeepSpeed C++ general environment info",
    "LibTorch",
    "c10d backends",
    "OpenMP",
    "fused CPU optimizer kernels (DS_SIMD=scalar|avx2|avx512 forces a variant)",
    "Storage (NVMe offload)",
    "Build"};

TEST(DsReport, PrintsEverySection) {
  auto r = report();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Sections s = parse_report(r.out);
  for (const char* name : kSections)
    EXPECT_EQ(s.count(name), 1u) << "missing section '" << name << "' in\n" << r.out;
}

TEST(DsReport, LibTorchSectionMatchesTheHeaders) {
  auto r = report();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  EXPECT_EQ(value(s, "LibTorch", "torch version"), TORCH_VERSION) << r.out;
  EXPECT_EQ(value(s, "DeepSpeed C++ general environment info", "torch version"), TORCH_VERSION);
  EXPECT_EQ(value(s, "LibTorch", "C++11 ABI"), _GLIBCXX_USE_CXX11_ABI
                                                   ? "yes (_GLIBCXX_USE_CXX11_ABI=1)"
                                                   : "no (_GLIBCXX_USE_CXX11_ABI=0)");
  EXPECT_NE(value(s, "LibTorch", "library").find("libtorch_cpu.so"), std::string::npos) << r.out;
  // at::show_config()'s facts and build settings, with the page of CXX_FLAGS left out.
  EXPECT_NE(value(s, "LibTorch", "built with").find("GCC"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("USE_OPENMP="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CXX_FLAGS="), std::string::npos) << r.out;
}

TEST(DsReport, GlooIsAvailableAndUsed) {
  auto r = report();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  EXPECT_EQ(value(s, "c10d backends", "gloo"),
            "yes (USE_C10D_GLOO defined, c10d::ProcessGroupGloo exported)")
      << r.out;
  for (const char* b : {"nccl", "mpi", "ucc"}) {
    const std::string v = value(s, "c10d backends", b);
    EXPECT_TRUE(starts_with(v, "yes (") || starts_with(v, "no")) << b << ": " << v;
    EXPECT_NE(v.find(std::string("c10d::ProcessGroup")), std::string::npos) << b << ": " << v;
  }
  // PyPI's LibTorch is a CUDA build, so NCCL is there (a CPU-only LibTorch says "no, needs a CUDA build").
  for (const char* b : {"nccl", "mpi", "ucc"})
    EXPECT_EQ(value(s, "c10d backends", b).find("inconsistent"), std::string::npos) << b;
  EXPECT_EQ(value(s, "c10d backends", "deepspeed-cpp uses"), "gloo (for the cpu accelerator)");
  // The probe of what Gloo does natively, before any group exists.
  const std::string caps = value(s, "collectives", "gloo");
  EXPECT_EQ(caps.rfind("gloo of LibTorch ", 0), 0u) << r.out;
  for (const char* op : {"avg ", "all_gather_into_tensor ", "reduce_scatter_tensor ", "partitioned collectives: ",
                         "reduces natively: "})
    EXPECT_NE(caps.find(op), std::string::npos) << op << " in " << caps;
}

TEST(DsReport, ThreadCountsAndTheirEnvironment) {
  // 1, not more: LibTorch 2.x caps its default at the cores it sees, whatever OMP_NUM_THREADS asks.
  auto r = report({}, {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  EXPECT_TRUE(starts_with(value(s, "OpenMP", "parallel backend"), "OpenMP ")) << r.out;
  EXPECT_EQ(leading_int(value(s, "OpenMP", "intra-op threads")), 1) << r.out;
  EXPECT_GT(leading_int(value(s, "OpenMP", "inter-op threads")), 0) << r.out;
  EXPECT_EQ(value(s, "OpenMP", "OpenMP max threads"), "1 (omp_get_max_threads)") << r.out;
  EXPECT_EQ(value(s, "OpenMP", "OMP_NUM_THREADS"), "1");
  EXPECT_EQ(value(s, "OpenMP", "engine will use"), "LibTorch's count, as OMP_NUM_THREADS=1 is set");

  // Without OMP_NUM_THREADS the engine shares the cores among the local ranks.
  r = report({}, {{"OMP_NUM_THREADS", std::nullopt},
                  {"MKL_NUM_THREADS", std::nullopt},
                  {"LOCAL_WORLD_SIZE", "2"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = parse_report(r.out);
  EXPECT_NE(value(s, "OpenMP", "engine will use").find(" cores / LOCAL_WORLD_SIZE 2)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(value(s, "OpenMP", "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(value(s, "OpenMP", "OMP_NUM_THREADS"), "not set");
  EXPECT_EQ(value(s, "OpenMP", "MKL_NUM_THREADS"), "not set");
}

TEST(DsReport, BuildSectionSaysHowThisBuildWasMade) {
  auto r = report();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  EXPECT_TRUE(starts_with(value(s, "Build", "compiler"), DS_EXPECTED_COMPILER)) << r.out;
  EXPECT_EQ(value(s, "Build", "build type"), DS_EXPECTED_BUILD_TYPE);
  // CMakeLists.txt makes ccache the launcher whenever it is installed.
  const std::string launcher = DS_EXPECTED_LAUNCHER;
  EXPECT_EQ(value(s, "Build", "compiler launcher"), launcher.empty() ? "none" : launcher);
  EXPECT_NE(value(s, "Build", "git commit"), "");
}

TEST(DsReport, DefaultStorageProbeIsTheCurrentDirectory) {
  auto r = report();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  const std::string cwd = std::filesystem::canonical(".").string();
  EXPECT_EQ(value(s, "Storage (NVMe offload)", "probed directory"),
            cwd + " (current directory; --path DIR probes another)");
  const std::string uring = value(s, "Storage (NVMe offload)", "io_uring");
  EXPECT_TRUE(uring == "yes (io_uring_queue_init and a no-op request succeeded)" ||
              starts_with(uring, "no: io_uring_queue_init: "))
      << uring;
}

TEST(DsReport, PathProbesODirectThereAndCleansUp) {
  ds_test::TempDir dir("ds_report_path");
  auto r = report({"--path", dir.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Sections s = parse_report(r.out);
  EXPECT_EQ(value(s, "Storage (NVMe offload)", "probed directory"),
            std::filesystem::canonical(dir.path()).string() + " (given by --path)");
  const std::string odirect = value(s, "Storage (NVMe offload)", "O_DIRECT");
  // tmpfs before Linux 6.6 refuses O_DIRECT; the disks CI runs on take it.
  EXPECT_TRUE(
      odirect == "yes (4096-byte aligned write and read-back with O_DIRECT)" ||
      starts_with(odirect,
                  "no: open(O_DIRECT): Invalid argument (this file system does not do direct I/O"))
      << odirect;
  EXPECT_NE(value(s, "Storage (NVMe offload)", "file system").find(" MiB free"), std::string::npos)
      << r.out;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the probe left its file behind";
}

TEST(DsReport, PathWhereNoFileCanBeCreatedSaysNoAndWhy) {
  // procfs refuses new files whoever asks, root included.
  auto r = report({"--path", "/proc"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string odirect = value(parse_report(r.out), "Storage (NVMe offload)", "O_DIRECT");
  EXPECT_TRUE(starts_with(odirect, "no: open(O_DIRECT): ")) << odirect;
}

TEST(DsReport, MissingPathIsOneLineNamingItAndExitCode2) {
  ds_test::TempDir dir("ds_report_missing");
  const std::string missing = dir.file("no such dir");
  auto r = report({"--path", missing});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ds_report: --path " + missing + ": no such directory\n");

  const std::string file = dir.file("plain_file");
  { std::ofstream(file) << "x"; }
  r = report({"--path", file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "ds_report: --path " + file + ": not a directory\n");
}

TEST(DsReport, UnknownFlagFailsWithOneLine) {
  auto r = report({"--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(ds_test::split_lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(starts_with(r.err, "ds_report: ")) << r.err;
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

TEST(DsReport, HelpNamesThePathOption) {
  auto r = report({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--path"), std::string::npos) << r.out;
}

}  // namespace

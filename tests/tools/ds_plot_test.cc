// ds_plot, black box: a generated csv_monitor run (in a directory whose name has a space and
// quotes) is drawn by the real gnuplot into a PNG of the requested size; metric selection; every
// bad input fails with its one line. Tests that need gnuplot skip, saying so, where it is not
// installed (scripts/setup.sh installs gnuplot-nox).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "tool_process.h"

namespace {

namespace fs = std::filesystem;

bool gnuplot_installed() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(pos, end - pos) + "/gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    pos = end + 1;
  }
  return false;
}

#define REQUIRE_GNUPLOT()                                                                        \
  if (!gnuplot_installed()) {                                                                    \
    GTEST_SKIP() << "gnuplot is not on PATH (scripts/setup.sh installs gnuplot-nox); ds_plot's " \
                    "drawing is untested here";                                                  \
  }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// What csv_monitor writes for `metric`: header, then one row per step of 8 samples.
std::string metric_csv(const std::string& metric, int rows, double start, double step) {
  std::string text = "step," + metric + "\n";
  for (int i = 1; i <= rows; ++i)
    text += std::to_string(8 * i) + "," + std::to_string(start + step * i) + "\n";
  return text;
}

// A run directory <tmp>/runs/<job> with train_loss, samples_per_sec, lr and grad_norm.
struct MonitorRun {
  ds_test::TempDir tmp{"ds_plot"};
  std::string dir;

  explicit MonitorRun(const std::string& job = "gpt run 'one' \"a\"") {
    dir = tmp.path() + "/runs/" + job;
    fs::create_directories(dir);
    write_file(file("train_loss"), metric_csv("train_loss", 20, 4.0, -0.1));
    write_file(file("samples_per_sec"), metric_csv("samples_per_sec", 20, 100, 2));
    write_file(file("lr"), metric_csv("lr", 20, 0, 1e-5));
    write_file(file("grad_norm"), metric_csv("grad_norm", 20, 3, -0.05));
  }
  std::string file(const std::string& metric) const {
    return dir + "/Train_Samples_" + metric + ".csv";
  }
};

ds_test::ToolResult ds_plot(const std::vector<std::string>& args,
                            const ds_test::EnvChanges& env = {}) {
  std::vector<std::string> argv = {DS_PLOT_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return ds_test::run_tool(argv, env);
}

// Width and height from a PNG's IHDR chunk; fails the test when `path` is not a PNG.
void png_size(const std::string& path, uint32_t& width, uint32_t& height) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), sizeof(h));
  ASSERT_EQ(in.gcount(), 24) << path;
  const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  ASSERT_EQ(std::memcmp(h, kSignature, 8), 0) << path << " is not a PNG";
  ASSERT_EQ(std::string(reinterpret_cast<char*>(h + 12), 4), "IHDR") << path;
  width = (uint32_t{h[16]} << 24) | (uint32_t{h[17]} << 16) | (uint32_t{h[18]} << 8) | h[19];
  height = (uint32_t{h[20]} << 24) | (uint32_t{h[21]} << 16) | (uint32_t{h[22]} << 8) | h[23];
}

// Files in `dir` other than the run's CSVs (left-over temporaries, images).
std::vector<std::string> non_csv_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".csv") out.push_back(e.path().filename().string());
  }
  return out;
}

// A fake gnuplot first on PATH: a shell script with `body`.
std::string fake_gnuplot_dir(const ds_test::TempDir& tmp, const std::string& body) {
  const std::string bin = tmp.path() + "/fakebin";
  fs::create_directories(bin);
  write_file(bin + "/gnuplot", "#!/bin/sh\n" + body);
  ::chmod((bin + "/gnuplot").c_str(), 0755);
  return bin;
}

TEST(DsPlot, DrawsLossAndThroughputByDefaultInADirectoryWithSpacesAndQuotes) {
  REQUIRE_GNUPLOT();
  MonitorRun run;
  auto r = ds_plot({run.dir, "--size", "640,480"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, run.dir + "/plot.png\n");
  EXPECT_EQ(r.err, "");
  uint32_t w = 0, h = 0;
  png_size(run.dir + "/plot.png", w, h);
  EXPECT_EQ(w, 640u);
  EXPECT_EQ(h, 480u);
  EXPECT_EQ(non_csv_files(run.dir), std::vector<std::string>{"plot.png"})
      << "temporary files left behind";
}

TEST(DsPlot, DefaultSizeGrowsWithThePanels) {
  REQUIRE_GNUPLOT();
  MonitorRun run;
  const std::string out = run.tmp.path() + "/chart 'x'.png";
  auto r = ds_plot(
      {run.dir, "-o", out, "--metrics", "train_loss,lr,grad_norm", "--title", "it's \"mine\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, out + "\n");
  uint32_t w = 0, h = 0;
  png_size(out, w, h);
  EXPECT_EQ(w, 900u);
  EXPECT_EQ(h, 900u);  // 300 per panel
}

TEST(DsPlot, ScriptHasOnePanelPerChosenMetricWithQuotedPaths) {
  MonitorRun run;
  // Default: the loss and the throughput, not lr or grad_norm.
  auto r = ds_plot({run.dir, "--print-script"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("set multiplot layout 2,1 title 'gpt run ''one'' \"a\"'\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("set title 'train_loss'\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set title 'samples_per_sec'\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("'lr'"), std::string::npos) << r.out;
  // gnuplot's single-quoted strings take no escapes; a quote is doubled.
  std::string quoted = run.file("train_loss");
  for (size_t pos = 0; (pos = quoted.find('\'', pos)) != std::string::npos; pos += 2)
    quoted.insert(pos, "'");
  EXPECT_NE(r.out.find("plot '" + quoted + "' skip 1 using 1:2"), std::string::npos) << r.out;

  // Chosen metrics, in the order given, duplicates once.
  r = ds_plot({run.dir, "--print-script", "--metrics", "lr,grad_norm,lr"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layout 2,1"), std::string::npos) << r.out;
  const size_t lr = r.out.find("set title 'lr'"), grad = r.out.find("set title 'grad_norm'");
  ASSERT_NE(lr, std::string::npos) << r.out;
  ASSERT_NE(grad, std::string::npos) << r.out;
  EXPECT_LT(lr, grad);
  EXPECT_EQ(r.out.find("train_loss"), std::string::npos) << r.out;
}

TEST(DsPlot, DefaultTitleIsTheJobName) {
  MonitorRun run("gpt_small");
  for (const std::string& dir : {run.dir, run.dir + "/", run.dir + "/."}) {
    auto r = ds_plot({dir, "--print-script"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("title 'gpt_small'\n"), std::string::npos) << dir << ":\n" << r.out;
  }
}

TEST(DsPlot, WithoutLossOrThroughputDrawsEveryMetric) {
  MonitorRun run;
  fs::remove(run.file("train_loss"));
  fs::remove(run.file("samples_per_sec"));
  auto r = ds_plot({run.dir, "--print-script"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layout 2,1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set title 'grad_norm'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set title 'lr'"), std::string::npos) << r.out;
}

TEST(DsPlot, MissingRunDir) {
  MonitorRun run;
  const std::string missing = run.tmp.path() + "/no such run";
  auto r = ds_plot({missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: " + missing + ": no such directory\n");
}

TEST(DsPlot, RunDirWithoutMetricFiles) {
  ds_test::TempDir empty("ds_plot_empty");
  write_file(empty.file("notes.csv"), "step,x\n1,2\n");
  auto r = ds_plot({empty.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: no Train_Samples_*.csv files in " + empty.path() +
                       " (expected a csv_monitor run: <output_path>/<job_name>)\n");
}

TEST(DsPlot, UnknownMetricListsTheRunsMetrics) {
  MonitorRun run;
  auto r = ds_plot({run.dir, "--metrics", "train_loss,tokens_per_sec"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: unknown metric 'tokens_per_sec': " + run.dir +
                       " has grad_norm, lr, samples_per_sec, train_loss\n");
}

TEST(DsPlot, MalformedCsvNamesFileAndLine) {
  MonitorRun run;
  write_file(run.file("train_loss"), "step,train_loss\n8,2.5\n16,abc\n24,2.1\n");
  auto r = ds_plot({run.dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: " + run.file("train_loss") +
                       ":3: expected '<samples>,<value>', got '16,abc'\n");

  write_file(run.file("train_loss"), "samples,train_loss\n8,2.5\n");
  r = ds_plot({run.dir});
  EXPECT_EQ(r.err, "ds_plot: " + run.file("train_loss") +
                       ":1: expected the header 'step,<metric>', got " + "'samples,train_loss'\n");

  write_file(run.file("train_loss"), "step,train_loss\n8,2.5,1\n");
  r = ds_plot({run.dir});
  EXPECT_EQ(r.err, "ds_plot: " + run.file("train_loss") +
                       ":2: expected '<samples>,<value>', got '8,2.5,1'\n");

  write_file(run.file("train_loss"), "step,train_loss\n");
  r = ds_plot({run.dir});
  EXPECT_EQ(r.err, "ds_plot: " + run.file("train_loss") + ": no data rows after the header\n");

  // nan and inf are what %.17g writes for them: valid.
  write_file(run.file("train_loss"), "step,train_loss\n8,nan\n16,inf\n24,2.5\n");
  r = ds_plot({run.dir, "--print-script"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(DsPlot, GnuplotNotInstalled) {
  MonitorRun run;
  ds_test::TempDir empty_bin("ds_plot_path");
  auto r = ds_plot({run.dir}, {{"PATH", empty_bin.path()}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "ds_plot: gnuplot not found on PATH (install it: apt-get install gnuplot-nox)\n");
  EXPECT_EQ(non_csv_files(run.dir), std::vector<std::string>{});
}

TEST(DsPlot, GnuplotFailingIsReportedWithItsErrorOutput) {
  MonitorRun run;
  const std::string bin =
      fake_gnuplot_dir(run.tmp,
                       "cat >/dev/null\necho 'gnuplot> plot x' >&2\n"
                       "echo '         ^' >&2\necho '   line 3:   boom' >&2\nexit 1\n");
  auto r = ds_plot({run.dir}, {{"PATH", bin + ":/usr/bin:/bin"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: gnuplot failed (exit status 1): gnuplot> plot x | line 3: boom\n");
  EXPECT_EQ(non_csv_files(run.dir), std::vector<std::string>{})
      << "a failed run must leave no image";
}

TEST(DsPlot, GnuplotWritingNothingIsAnError) {
  MonitorRun run;
  const std::string bin = fake_gnuplot_dir(run.tmp, "cat >/dev/null\nexit 0\n");
  auto r = ds_plot({run.dir}, {{"PATH", bin + ":/usr/bin:/bin"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("ds_plot: gnuplot wrote no image to " + run.dir + "/plot.png.tmp", 0), 0u)
      << r.err;
  EXPECT_EQ(non_csv_files(run.dir), std::vector<std::string>{});
}

TEST(DsPlot, RealGnuplotErrorComesThrough) {
  REQUIRE_GNUPLOT();
  MonitorRun run;
  // Values gnuplot cannot draw: every y undefined.
  write_file(run.file("train_loss"), "step,train_loss\n8,nan\n16,nan\n");
  auto r = ds_plot({run.dir, "--metrics", "train_loss"});
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(ds_test::split_lines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("ds_plot: gnuplot failed (exit status 1): ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("undefined"), std::string::npos) << r.err;
  EXPECT_EQ(non_csv_files(run.dir), std::vector<std::string>{});
}

TEST(DsPlot, BadSizeAndOutputDirectory) {
  MonitorRun run;
  auto r = ds_plot({run.dir, "--size", "640x480"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "ds_plot: --size expects WIDTH,HEIGHT in pixels, each 100 to 20000, got '640x480'\n");
  r = ds_plot({run.dir, "-o", run.tmp.path() + "/nowhere/plot.png"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds_plot: cannot write " + run.tmp.path() +
                       "/nowhere/plot.png: " + run.tmp.path() + "/nowhere is not a directory\n");
}

TEST(DsPlot, BadCommandLine) {
  auto r = ds_plot({});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("ds_plot: ", 0), 0u) << r.err;
  EXPECT_EQ(ds_test::split_lines(r.err).size(), 1u) << r.err;
  r = ds_plot({"/tmp", "--bogus"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

}  // namespace

// ds_plot RUN_DIR [-o out.png] [--metrics a,b] [--title T] [--size W,H] [--print-script]: draws a
// csv_monitor run
// (<output_path>/<job_name>/Train_Samples_<metric>.csv) as a PNG with gnuplot, one panel per metric
// over the samples seen, and prints the PNG's path (--print-script prints the gnuplot script
// instead of running it).
//
// Default metrics: the loss and the throughput (train_loss, samples_per_sec, tokens_per_sec: those
// the run has), or every metric when it has none of them. Default output RUN_DIR/plot.png, written
// under a temporary name and renamed, so a failed run never leaves half an image. Bad input
// (missing directory, no metric files, an unknown metric, a malformed CSV line, gnuplot missing or
// failing): one line `ds_plot: <message>` on stderr and exit 1.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "plot/csv_run.h"
#include "plot/gnuplot.h"

namespace {

namespace fs = std::filesystem;
using deepspeed::plot::PlotError;

constexpr const char* kDefaultMetrics[] = {"train_loss", "samples_per_sec", "tokens_per_sec"};
constexpr int kMinPixels = 100, kMaxPixels = 20000;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> choose_metrics(const std::map<std::string, std::string>& available,
                                        const std::vector<std::string>& requested,
                                        const std::string& run_dir) {
  std::vector<std::string> names;
  for (const auto& [name, path] : available) names.push_back(name);
  std::vector<std::string> chosen;
  if (!requested.empty()) {
    for (const auto& m : requested) {
      if (available.count(m) == 0) {
        throw PlotError("unknown metric '" + m + "': " + run_dir + " has " + join(names));
      }
      if (std::find(chosen.begin(), chosen.end(), m) == chosen.end()) chosen.push_back(m);
    }
    return chosen;
  }
  for (const char* m : kDefaultMetrics) {
    if (available.count(m)) chosen.push_back(m);
  }
  return chosen.empty() ? names : chosen;
}

// "W,H" in pixels.
void parse_size(const std::string& text, int& width, int& height) {
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d,%d%c", &width, &height, &tail) != 2 || width < kMinPixels ||
      width > kMaxPixels || height < kMinPixels || height > kMaxPixels) {
    throw PlotError("--size expects WIDTH,HEIGHT in pixels, each " + std::to_string(kMinPixels) +
                    " to " + std::to_string(kMaxPixels) + ", got '" + text + "'");
  }
}

// The run's name for the default title: the job name, i.e. RUN_DIR's last component.
std::string run_name(const std::string& run_dir) {
  fs::path p =
      fs::absolute(run_dir).lexically_normal();  // "runs/gpt/." and "runs/gpt/" -> ".../runs/gpt/"
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

struct PlotOptions {
  std::string run_dir;
  std::string output;
  std::vector<std::string> metrics;
  std::string title;
  std::string size;
  bool print_script = false;
};

int plot(const PlotOptions& o) {
  const std::string& run_dir = o.run_dir;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    throw PlotError(run_dir + ": " +
                    (fs::exists(run_dir, ec) ? "not a directory" : "no such directory"));
  }
  const auto available = deepspeed::plot::find_metrics(run_dir);
  if (available.empty()) {
    throw PlotError("no Train_Samples_*.csv files in " + run_dir +
                    " (expected a csv_monitor run: <output_path>/<job_name>)");
  }
  deepspeed::plot::Chart chart;
  for (const auto& m : choose_metrics(available, o.metrics, run_dir)) {
    deepspeed::plot::check_metric_csv(available.at(m));
    chart.panels.push_back({m, available.at(m)});
  }
  const int panels = static_cast<int>(chart.panels.size());
  chart.width = 900;
  chart.height = std::min(kMaxPixels, std::max(400, 300 * panels));
  if (!o.size.empty()) parse_size(o.size, chart.width, chart.height);
  chart.title = o.title.empty() ? run_name(run_dir) : o.title;

  const std::string output =
      o.output.empty() ? (fs::path(run_dir) / "plot.png").string() : o.output;
  if (o.print_script) {
    chart.output = output;
    std::cout << deepspeed::plot::gnuplot_script(chart);
    return 0;
  }
  const fs::path parent = fs::path(output).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw PlotError("cannot write " + output + ": " + parent.string() + " is not a directory");
  }
  // gnuplot writes a temporary file beside the output; only a complete image is renamed into place.
  chart.output = output + ".tmp" + std::to_string(::getpid());
  try {
    deepspeed::plot::run_gnuplot(deepspeed::plot::gnuplot_script(chart));
    if (fs::file_size(chart.output, ec) == 0 || ec)
      throw PlotError("gnuplot wrote no image to " + chart.output);
    fs::rename(chart.output, output, ec);
    if (ec)
      throw PlotError("cannot rename " + chart.output + " to " + output + ": " + ec.message());
  } catch (...) {
    fs::remove(chart.output, ec);
    throw;
  }
  std::cout << output << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Draw a csv_monitor run (Train_Samples_<metric>.csv files) as a PNG chart with gnuplot."};
  PlotOptions o;
  app.add_option("run_dir", o.run_dir, "the run's directory: <output_path>/<job_name>")->required();
  app.add_option("-o,--output", o.output, "PNG to write (default: RUN_DIR/plot.png)");
  app.add_option("--metrics", o.metrics,
                 "comma-separated metrics, one panel each (default: train_loss and throughput)")
      ->delimiter(',');
  app.add_option("--title", o.title, "chart title (default: the run directory's name)");
  app.add_option("--size", o.size,
                 "image size in pixels, WIDTH,HEIGHT (default: 900 wide, 300 per panel)");
  app.add_flag("--print-script", o.print_script,
               "print the gnuplot script instead of running gnuplot");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ds_plot: " << e.what() << " (see --help)\n";
    return 1;
  }
  try {
    return plot(o);
  } catch (const PlotError& e) {
    std::cerr << "ds_plot: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ds_plot: " << e.what() << "\n";
    return 1;
  }
}

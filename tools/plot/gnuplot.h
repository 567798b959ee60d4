// ds_plot's drawing side: a gnuplot script for one chart (one panel per metric, stacked) and
// running gnuplot on it as a child process (no shell: the script goes to its stdin, data files are
// named in the script).
#pragma once

#include <string>
#include <vector>

#include "plot/csv_run.h"

namespace deepspeed::plot {

struct Panel {
  std::string metric;    // the panel's title
  std::string csv_path;  // Train_Samples_<metric>.csv
};

struct Chart {
  std::string title;
  std::string output;  // the PNG gnuplot writes
  int width = 0;       // pixels
  int height = 0;
  std::vector<Panel> panels;
};

// `text` as a gnuplot single-quoted string: no escapes inside, a quote doubled ('it''s'). Throws
// PlotError for a line break, which a gnuplot string cannot hold.
std::string gnuplot_quote(const std::string& text);

// The script: PNG terminal (pngcairo where gnuplot has it, else libgd's png), one multiplot row per
// panel, x axis the samples column, y the value; text is not "enhanced", so metric names keep their
// underscores.
std::string gnuplot_script(const Chart& chart);

// Runs `gnuplot` (looked up on PATH) with `script` on stdin. Throws PlotError when gnuplot is not
// installed (with the package to install) or exits unsuccessfully (with its error output, on one
// line).
void run_gnuplot(const std::string& script);

}  // namespace deepspeed::plot

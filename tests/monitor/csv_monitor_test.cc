// The CSV monitor's files: DeepSpeed's names and layout, values that read back exactly, appending
// on reopen, and a clear error for a directory it cannot create.
#include "monitor/csv_monitor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "temp_dir.h"

namespace deepspeed::monitor {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(CsvMonitor, OneFilePerMetricWithDeepSpeedsNamesAndHeader) {
  ds_test::TempDir dir("csv_monitor");
  CsvMonitor m(dir.path(), "job");
  EXPECT_EQ(m.log_dir(), dir.path() + "/job");
  m.write_events({{"Train/Samples/train_loss", 2.5, 8}, {"Train/Samples/lr", 1e-3, 8}});
  m.write_events({{"Train/Samples/train_loss", 0.1 + 0.2, 16}, {"Train/Samples/lr", 2e-3, 16}});
  EXPECT_EQ(m.file_for("Train/Samples/train_loss"),
            dir.path() + "/job/Train_Samples_train_loss.csv");
  const auto loss = lines_of(dir.path() + "/job/Train_Samples_train_loss.csv");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[0], "step,train_loss");
  EXPECT_EQ(loss[1], "8,2.5");
  // Values read back bit for bit.
  const std::string v = loss[2].substr(loss[2].find(',') + 1);
  EXPECT_EQ(loss[2].substr(0, 3), "16,");
  EXPECT_EQ(std::stod(v), 0.1 + 0.2);
  const auto lr = lines_of(dir.path() + "/job/Train_Samples_lr.csv");
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_EQ(lr[0], "step,lr");
  EXPECT_EQ(std::stod(lr[2].substr(3)), 2e-3);
  // Spaces become underscores too; a name without '/' is its own header.
  m.write_events({{"my metric", 1, 1}});
  EXPECT_EQ(lines_of(dir.path() + "/job/my_metric.csv")[0], "step,my metric");
}

TEST(CsvMonitor, FlushedAfterEveryWriteAndAppendedOnReopen) {
  ds_test::TempDir dir("csv_monitor");
  {
    CsvMonitor m(dir.path(), "run");
    m.write_events({{"Train/Samples/train_loss", 1, 4}});
    // Still open: the row is on disk already (a crash loses nothing written).
    EXPECT_EQ(lines_of(m.file_for("Train/Samples/train_loss")).size(), 2u);
  }
  CsvMonitor resumed(dir.path(), "run");
  resumed.write_events({{"Train/Samples/train_loss", 2, 8}});
  const auto rows = lines_of(resumed.file_for("Train/Samples/train_loss"));
  ASSERT_EQ(rows.size(), 3u) << "one header, then both runs' rows";
  EXPECT_EQ(rows[0], "step,train_loss");
  EXPECT_EQ(rows[1], "4,1");
  EXPECT_EQ(rows[2], "8,2");
}

TEST(CsvMonitor, UncreatableDirectoryIsAClearError) {
  ds_test::TempDir dir("csv_monitor");
  std::ofstream(dir.file("blocker")) << "a file, not a directory";
  try {
    CsvMonitor m(dir.file("blocker"), "job");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("csv_monitor: cannot create the output directory " +
                                         dir.file("blocker") + "/job"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace deepspeed::monitor

// The step observers both engines publish to (runtime/step_observer.h) and the console observer that prints the
// log line (runtime/console_observer.h).
#include "runtime/console_observer.h"
#include "runtime/monitor_observer.h"
#include "runtime/step_observer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace rt = deepspeed::runtime;
using ::testing::HasSubstr;

namespace {

// Writes each hook it sees, tagged with its name, to a shared journal.
class Recorder : public rt::StepObserver {
 public:
  Recorder(std::string name, std::vector<std::string>* journal) : name_(std::move(name)), journal_(journal) {}
  void begin_forward(int64_t s) override { note("begin_forward " + std::to_string(s)); }
  void end_forward() override { note("end_forward"); }
  void begin_backward() override { note("begin_backward"); }
  void end_backward() override { note("end_backward"); }
  void begin_step() override { note("begin_step"); }
  void end_step(bool boundary, int64_t s) override { note("end_step " + std::to_string(boundary) + " " + std::to_string(s)); }
  void on_report(const rt::StepReport& r) override { note("report " + std::to_string(r.global_steps)); }
  void on_resume(int64_t s) override { note("resume " + std::to_string(s)); }

 private:
  void note(const std::string& what) { journal_->push_back(name_ + ": " + what); }
  std::string name_;
  std::vector<std::string>* journal_;
};

rt::StepReport report(int64_t step, double loss) {
  rt::StepReport r;
  r.global_steps = step;
  r.loss = loss;
  r.lrs = {0.5};
  r.grad_norm = 2.0;
  return r;
}

}  // namespace

TEST(StepObservers, EveryHookReachesEveryObserverInTheOrderAdded) {
  std::vector<std::string> journal;
  rt::StepObservers observers;
  observers.add(std::make_unique<Recorder>("a", &journal));
  observers.add(nullptr);  // a feature that is off adds nothing
  observers.add(std::make_unique<Recorder>("b", &journal));
  observers.begin_forward(3);
  observers.end_forward();
  observers.begin_backward();
  observers.end_backward();
  observers.begin_step();
  observers.on_report(report(4, 1.0));
  observers.end_step(true, 4);
  observers.on_resume(9);
  const std::vector<std::string> expected = {
      "a: begin_forward 3", "b: begin_forward 3", "a: end_forward", "b: end_forward", "a: begin_backward",
      "b: begin_backward", "a: end_backward",    "b: end_backward",  "a: begin_step",  "b: begin_step",
      "a: report 4",        "b: report 4",        "a: end_step 1 4",  "b: end_step 1 4", "a: resume 9",
      "b: resume 9"};
  EXPECT_EQ(journal, expected);
}

TEST(ConsoleObserver, LineEveryStepsPerPrintWithTheWindowMeanLossFromTheSource) {
  rt::ConsoleOptions o;
  o.writer = true;
  o.steps_per_print = 2;
  o.samples_per_step = 8;
  std::vector<double> window_losses;
  std::vector<int64_t> window_steps;
  rt::ConsoleObserver console(o, [&](const rt::StepReport& last, double window_loss, const rt::LogWindow::Span& w) {
    window_losses.push_back(window_loss);
    window_steps.push_back(w.steps);
    rt::LogLineParts parts;
    parts.loss = window_loss * 10;  // the engine's say (it averages over ranks here)
    parts.extra = "engine part";
    parts.table = "table\n";
    return parts;
  });
  ::testing::internal::CaptureStdout();
  console.on_report(report(1, 1.0));
  console.on_report(report(2, 3.0));  // line: mean of 1 and 3
  console.on_report(report(3, 5.0));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(window_losses, std::vector<double>({2.0}));
  EXPECT_EQ(window_steps, std::vector<int64_t>({2}));
  EXPECT_THAT(out, HasSubstr("step 2 | loss 20.0000 | lr [0.5] | grad_norm 2.0000"));
  EXPECT_THAT(out, HasSubstr("engine part\ntable\n"));
  EXPECT_EQ(out.find("step 3"), std::string::npos);
}

TEST(ConsoleObserver, EveryRankAsksTheSourceButOnlyTheWriterPrints) {
  // The engine's source all-reduces the loss: a rank that skipped it would leave the others waiting.
  rt::ConsoleOptions o;
  o.writer = false;
  o.steps_per_print = 1;
  int asked = 0;
  rt::ConsoleObserver console(o, [&](const rt::StepReport&, double, const rt::LogWindow::Span&) {
    ++asked;
    return rt::LogLineParts{};
  });
  ::testing::internal::CaptureStdout();
  console.on_report(report(1, 1.0));
  console.on_report(report(2, 1.0));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(asked, 2);
}

TEST(ConsoleObserver, AResumeStartsTheWindowAtTheLoadedStep) {
  rt::ConsoleOptions o;
  o.writer = true;
  o.steps_per_print = 10;
  std::vector<double> window_losses;
  std::vector<int64_t> window_steps;
  rt::ConsoleObserver console(o, [&](const rt::StepReport&, double window_loss, const rt::LogWindow::Span& w) {
    window_losses.push_back(window_loss);
    window_steps.push_back(w.steps);
    return rt::LogLineParts{};
  });
  ::testing::internal::CaptureStdout();
  console.on_report(report(1, 100.0));  // before the load: belongs to no window after it
  console.on_resume(17);
  console.on_report(report(18, 1.0));
  console.on_report(report(19, 2.0));
  console.on_report(report(20, 6.0));
  (void)::testing::internal::GetCapturedStdout();
  EXPECT_EQ(window_losses, std::vector<double>({3.0}));
  EXPECT_EQ(window_steps, std::vector<int64_t>({3}));
}

// The monitors' x-axis is the sample count the engine reports (DeepSpeed's global_samples), not steps x the current
// batch size: after resuming a checkpoint that trained at another batch size the two differ.
TEST(MonitorObserver, EventsAreAtTheReportedGlobalSamples) {
  ds_test::TempDir dir("monitor_observer");
  const auto cfg = deepspeed::Config::from_string(
      R"({"train_batch_size": 8, "csv_monitor": {"enabled": true, "output_path": ")" + dir.path() +
      R"(", "job_name": "job"}})");
  auto observer = rt::MonitorObserver::create(cfg, /*rank=*/0, /*samples_per_step=*/8, /*tokens_per_sample=*/0);
  ASSERT_NE(observer, nullptr);
  rt::StepReport r = report(/*step=*/3, /*loss=*/1.5);
  r.global_samples = 40;  // 2 steps at batch 16 before the resume, 1 at 8
  observer->on_report(r);
  std::ifstream in(dir.path() + "/job/Train_Samples_train_loss.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(row, "40,1.5");
}

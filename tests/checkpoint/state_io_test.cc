// save_state/load_state round trips (dtypes, views, nested containers), load errors that name the
// file and the fault, metadata and shape/dtype checks, and Python's torch.load reading our files
// (when python3-torch exists).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "deepspeed/checkpoint.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ds_test::TempDir;

namespace {

// Expects `fn` to throw CheckpointError whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const ckpt::CheckpointError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << what << " lacks " << p;
  }
}

ckpt::StateDict sample_state() {
  at::manual_seed(7);
  ckpt::StateDict inner = ckpt::make_state_dict();
  inner.insert("fc.weight", at::randn({3, 5}).to(at::kBFloat16));
  inner.insert("fc.bias", at::randn({5}).to(at::kHalf));
  ckpt::StateDict only = ckpt::make_state_dict();  // a single-key dict
  only.insert("step", static_cast<int64_t>(42));
  c10::impl::GenericList one(c10::AnyType::get());  // a single-element list
  one.push_back(c10::IValue(std::string("x")));
  c10::impl::GenericList mixed(c10::AnyType::get());
  mixed.push_back(at::arange(6, at::kLong));
  mixed.push_back(1.5);
  mixed.push_back(c10::IValue(std::string("adam")));
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("module", inner);
  s.insert("only", only);
  s.insert("one", one);
  s.insert("mixed", mixed);
  s.insert("fp32", at::randn({4, 4}));
  s.insert("int64", at::arange(-5, 5, at::kLong));
  s.insert("lr", 3e-4);
  s.insert("global_steps", static_cast<int64_t>(1000));
  s.insert("fp16_enabled", true);
  s.insert("name", std::string("gpt"));
  return s;
}

void expect_equal_states(const ckpt::StateDict& a, const ckpt::StateDict& b) {
  for (const char* key : {"module/fc.weight", "module/fc.bias", "fp32", "int64"}) {
    at::Tensor x = ckpt::find_entry(a, key)->toTensor(), y = ckpt::find_entry(b, key)->toTensor();
    EXPECT_EQ(x.scalar_type(), y.scalar_type()) << key;
    EXPECT_TRUE(x.equal(y)) << key;
  }
  EXPECT_EQ(ckpt::find_entry(b, "only/step")->toInt(), 42);
  EXPECT_EQ(b.at("one").toList().size(), 1u);
  EXPECT_EQ(b.at("one").toList().get(0).toStringRef(), "x");
  c10::impl::GenericList mixed = b.at("mixed").toList();
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_TRUE(mixed.get(0).toTensor().equal(at::arange(6, at::kLong)));
  EXPECT_EQ(mixed.get(1).toDouble(), 1.5);
  EXPECT_EQ(mixed.get(2).toStringRef(), "adam");
  EXPECT_EQ(b.at("lr").toDouble(), 3e-4);
  EXPECT_EQ(b.at("global_steps").toInt(), 1000);
  EXPECT_EQ(b.at("fp16_enabled").toBool(), true);
  EXPECT_EQ(b.at("name").toStringRef(), "gpt");
}

int64_t file_size(const std::string& path) {
  return static_cast<int64_t>(std::ifstream(path, std::ios::ate | std::ios::binary).tellg());
}

}  // namespace

TEST(StateIo, RoundTripDtypesAndNestedContainers) {
  TempDir tmp;
  std::string path = ckpt::model_states_path(tmp.path(), "global_step1");
  ckpt::StateDict s = sample_state();
  ckpt::save_state(path, s);
  expect_equal_states(s, ckpt::load_state(path));
  expect_equal_states(s, ckpt::load_state(path, ckpt::LoadOptions{/*mmap=*/true}));
}

TEST(StateIo, ViewsSaveOnlyTheirOwnElements) {
  TempDir tmp;
  at::Tensor flat = at::arange(1 << 20, at::kFloat);  // 4 MiB
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("slice", flat.narrow(0, 1000, 16));
  s.insert("strided", flat.narrow(0, 0, 64).view({8, 8}).t());
  s.insert("bf16_view", flat.to(at::kBFloat16).narrow(0, 5, 7));
  std::string path = tmp.path() + "/views.pt";
  ckpt::save_state(path, s);
  EXPECT_LT(file_size(path), 64 * 1024);  // not the 4 MiB storage behind the views
  for (bool mmap : {false, true}) {
    ckpt::StateDict b = ckpt::load_state(path, ckpt::LoadOptions{mmap});
    EXPECT_TRUE(b.at("slice").toTensor().equal(flat.narrow(0, 1000, 16)));
    EXPECT_TRUE(b.at("strided").toTensor().equal(flat.narrow(0, 0, 64).view({8, 8}).t()));
    EXPECT_TRUE(b.at("bf16_view").toTensor().equal(flat.to(at::kBFloat16).narrow(0, 5, 7)));
  }
  // Loaded tensors are writable and independent of the file (mapped privately).
  ckpt::StateDict b = ckpt::load_state(path, ckpt::LoadOptions{true});
  b.at("slice").toTensor().fill_(-1);
  EXPECT_TRUE(ckpt::load_state(path).at("slice").toTensor().equal(flat.narrow(0, 1000, 16)));
}

TEST(StateIo, MissingFileIsNamed) {
  TempDir tmp;
  std::string path = tmp.path() + "/nope.pt";
  expect_error([&] { ckpt::load_state(path); }, {path, "missing"});
  expect_error([&] { ckpt::load_state(path, ckpt::LoadOptions{true}); }, {path, "missing"});
}

TEST(StateIo, TruncatedFileIsNamed) {
  TempDir tmp;
  std::vector<char> bytes = ckpt::serialize_state(sample_state());
  for (size_t keep : {bytes.size() - 1, bytes.size() - 30, bytes.size() / 2, size_t{10}}) {
    std::string path = tmp.path() + "/cut" + std::to_string(keep) + ".pt";
    ckpt::write_file_atomic(path, bytes.data(), keep);
    expect_error([&] { ckpt::load_state(path); }, {path, "truncated"});
  }
}

TEST(StateIo, NotACheckpointIsNamed) {
  TempDir tmp;
  std::string path = tmp.path() + "/notes.txt";
  std::string text = "this is not a checkpoint";
  ckpt::write_file_atomic(path, text.data(), text.size());
  expect_error([&] { ckpt::load_state(path); }, {path, "not a checkpoint"});
  std::string empty = tmp.path() + "/empty.pt";
  ckpt::write_file_atomic(empty, "", 0);
  expect_error([&] { ckpt::load_state(empty); }, {empty, "not a checkpoint"});
  // A valid archive holding a list, not a dict.
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(at::ones({2}));
  std::vector<char> bytes = torch::jit::pickle_save(list);
  std::string listed = tmp.path() + "/list.pt";
  ckpt::write_file_atomic(listed, bytes.data(), bytes.size());
  expect_error([&] { ckpt::load_state(listed); }, {listed, "not a dict"});
}

TEST(StateIo, MetadataMismatchNamesFileAndField) {
  ckpt::StateDict s = sample_state();
  expect_error([&] { ckpt::check_metadata(s, "f.pt"); },
               {"f.pt", "not a deepspeed-cpp checkpoint", "ds_checkpoint_format"});
  ckpt::stamp_metadata(s, "run-a");
  EXPECT_NO_THROW(ckpt::check_metadata(s, "f.pt", "run-a"));
  EXPECT_NO_THROW(ckpt::check_metadata(s, "f.pt"));
  expect_error([&] { ckpt::check_metadata(s, "f.pt", "run-b"); },
               {"f.pt", "another run", "run-a", "run-b"});
  s.insert_or_assign(ckpt::kFormatKey, ckpt::kCheckpointFormat + 1);
  expect_error([&] { ckpt::check_metadata(s, "f.pt"); },
               {"f.pt", "ds_checkpoint_format 2", "reads formats 1..1"});
  // The stamp survives a round trip.
  TempDir tmp;
  ckpt::StateDict t = ckpt::make_state_dict();
  ckpt::stamp_metadata(t, "run-x");
  ckpt::save_state(tmp.path() + "/m.pt", t);
  ckpt::StateDict back = ckpt::load_state(tmp.path() + "/m.pt");
  EXPECT_NO_THROW(ckpt::check_metadata(back, "m.pt", "run-x"));
  EXPECT_EQ(back.at(ckpt::kVersionKey).toStringRef(), ckpt::ds_version());
}

TEST(StateIo, CheckStateSaysWhichKeyShapeOrDtypeDiffers) {
  ckpt::StateDict s = sample_state();
  using E = ckpt::ExpectedTensor;
  EXPECT_NO_THROW(ckpt::check_state(
      s, "f.pt", {"module", "lr"},
      {E{"module/fc.weight", {3, 5}, at::kBFloat16}, E{"fp32", {4, 4}, at::kFloat}}));
  expect_error([&] { ckpt::check_state(s, "f.pt", {"optimizer"}, {}); },
               {"f.pt", "no key 'optimizer'"});
  expect_error(
      [&] {
        ckpt::check_state(s, "f.pt", {}, {E{"module/fc.weight", {5, 3}, at::kBFloat16}});
      },
      {"f.pt", "module/fc.weight", "shape [3, 5]", "expected [5, 3]"});
  expect_error(
      [&] {
        ckpt::check_state(s, "f.pt", {}, {E{"module/fc.bias", {5}, at::kFloat}});
      },
      {"f.pt", "module/fc.bias", "dtype Half", "expected Float"});
  expect_error(
      [&] {
        ckpt::check_state(s, "f.pt", {}, {E{"module/fc.gone", {5}, at::kFloat}});
      },
      {"no tensor 'module/fc.gone'"});
  expect_error(
      [&] {
        ckpt::check_state(s, "f.pt", {}, {E{"lr", {}, at::kFloat}});
      },
      {"'lr' is a Double"});
}

TEST(StateIo, PythonTorchLoadReadsOurFiles) {
  // The project's .venv (scripts/setup.sh installs torch there), whatever python3 comes first in PATH.
  const std::string python = DS_TEST_PYTHON;
  // scripts/setup.sh always installs torch there, so a missing one is a broken set-up, not a reason to skip.
  ASSERT_EQ(std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()), 0)
      << python << " cannot import torch (run scripts/setup.sh); interop not checked";
  TempDir tmp;
  ckpt::StateDict s = ckpt::make_state_dict();
  ckpt::StateDict module = ckpt::make_state_dict();
  at::Tensor flat = at::arange(100, at::kFloat);
  module.insert("w", flat.narrow(0, 10, 6).view({2, 3}));
  module.insert("bf16", at::full({3}, 1.5).to(at::kBFloat16));
  module.insert("fp16", at::full({2}, -2.25).to(at::kHalf));
  s.insert("module", module);
  s.insert("ids", at::arange(4, at::kLong));
  s.insert("global_steps", static_cast<int64_t>(12));
  s.insert("lr", 0.5);
  s.insert("tag", std::string("global_step12"));
  ckpt::stamp_metadata(s, "py");
  std::string path = tmp.path() + "/mp_rank_00_model_states.pt";
  ckpt::save_state(path, s);
  std::string script = tmp.path() + "/check.py";
  std::ofstream(script)
      << "import sys, torch\n"
         "s = torch.load(sys.argv[1])\n"
         "m = s['module']\n"
         "assert m['w'].tolist() == [[10., 11., 12.], [13., 14., 15.]], m['w']\n"
         "assert m['w'].untyped_storage().nbytes() == 24 if hasattr(m['w'], 'untyped_storage') "
         "else True\n"
         "assert m['bf16'].dtype == torch.bfloat16 and m['bf16'].float().tolist() == [1.5] * 3\n"
         "assert m['fp16'].dtype == torch.float16 and m['fp16'].float().tolist() == [-2.25] * 2\n"
         "assert s['ids'].dtype == torch.int64 and s['ids'].tolist() == [0, 1, 2, 3]\n"
         "assert s['global_steps'] == 12 and s['lr'] == 0.5 and s['tag'] == 'global_step12'\n"
         "assert s['ds_run_id'] == 'py' and s['ds_checkpoint_format'] == 1\n"
         "print('ok')\n";
  EXPECT_EQ(std::system((python + " " + script + " " + path).c_str()), 0);
}

TEST(StateIo, SavedFileHoldsExactlyTheSerializedBytes) {
  TempDir tmp;
  ckpt::StateDict s = sample_state();
  std::string path = tmp.path() + "/s.pt";
  ckpt::save_state(path, s);
  std::vector<char> file = ckpt::default_file_system()->read_file(path);
  EXPECT_EQ(file, ckpt::serialize_state(s));
}

TEST(StateIo, SharedStorageIsWrittenOnceAndDenseViewsAlias) {
  TempDir tmp;
  at::Tensor big = at::arange(1 << 18, at::kFloat);  // 1 MiB
  at::Tensor flat = at::arange(1 << 20, at::kFloat);
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("a", big);
  s.insert("b", big);  // the same tensor twice: one storage record
  // A dense but transposed window of a larger buffer: written as just its 12 elements, strides
  // kept.
  s.insert("t", flat.narrow(0, 100, 12).view({3, 4}).t());
  std::string path = tmp.path() + "/shared.pt";
  ckpt::save_state(path, s);
  EXPECT_LT(file_size(path), (1 << 20) + 64 * 1024);
  ckpt::StateDict b = ckpt::load_state(path);
  EXPECT_TRUE(b.at("a").toTensor().equal(big));
  EXPECT_TRUE(b.at("b").toTensor().equal(big));
  at::Tensor t = b.at("t").toTensor();
  EXPECT_TRUE(t.equal(flat.narrow(0, 100, 12).view({3, 4}).t()));
  EXPECT_EQ(t.storage().nbytes(), 12u * sizeof(float));
  // Saving left the source untouched (aliases are read, never written).
  EXPECT_TRUE(flat.equal(at::arange(1 << 20, at::kFloat)));
}

TEST(StateIo, ArchiveSinkFailureStopsWritingAndKeepsItsType) {
  struct DiskFull : std::runtime_error {
    DiskFull() : std::runtime_error("disk full") {}
  };
  ckpt::StateDict s = ckpt::make_state_dict();
  s.insert("w", at::ones({1 << 16}));
  s.insert("v", at::ones({1 << 16}));
  const int64_t total = ckpt::write_torch_archive(c10::IValue(s), [](const char*, size_t) {});
  for (int64_t budget : {int64_t{0}, int64_t{100}, total / 2, total - 1}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    int64_t seen = 0, calls_after_failure = 0;
    bool failed = false;
    auto sink = [&](const char*, size_t n) {
      if (failed) ++calls_after_failure;
      if (seen + static_cast<int64_t>(n) > budget) {
        failed = true;
        throw DiskFull();
      }
      seen += static_cast<int64_t>(n);
    };
    EXPECT_THROW(ckpt::write_torch_archive(c10::IValue(s), sink), DiskFull);
    EXPECT_EQ(calls_after_failure, 0);
  }
}

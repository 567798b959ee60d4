// deepspeed::data::GPTDataset against megatron-core's GPTDataset (tests/data/megatron_gpt_samples.py wrote every
// sample it gives, in its order, for the CASES below): the same samples in the same order for one epoch, for several
// epochs with the final one shuffled apart and shuffled together, short windows and a split; then the index cache:
// built once, reused, rebuilt for other options or when it does not match, never read wrong.
#include "deepspeed/data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/data/blended_dataset.h"
#include "deepspeed/error.h"
#include "temp_dir.h"

namespace {

namespace dd = deepspeed::data;
namespace fs = std::filesystem;

struct Case {
  const char* name;
  int64_t sequence_length, num_samples;
  uint32_t seed;
  int64_t first, end;
};
// megatron_gpt_samples.py's CASES.
const Case kCases[] = {{"one_epoch", 16, -1, 1234, 0, 49},
                       {"four_epochs_last_apart", 16, 300, 1234, 0, 49},
                       {"two_epochs_shuffled_together", 16, 171, 1234, 0, 49},
                       {"short_windows", 7, 260, 5, 0, 49},
                       {"split", 16, 60, 99, 10, 40}};

std::string data_dir() {
  const char* dir = std::getenv("DS_MEGATRON_DATA");
  return dir == nullptr ? "" : dir;
}

std::shared_ptr<const dd::IndexedDataset> corpus() {
  return std::make_shared<const dd::IndexedDataset>(data_dir() + "/megatron_uint16");
}

dd::GPTDatasetOptions options_of(const Case& c, const std::string& cache) {
  dd::GPTDatasetOptions o;
  o.sequence_length = c.sequence_length;
  o.num_samples = c.num_samples;
  o.seed = c.seed;
  o.first_sequence = c.first;
  o.end_sequence = c.end;
  o.cache_dir = cache;
  return o;
}

std::vector<int64_t> all_samples(const dd::TokenDataset& ds) {
  std::vector<int64_t> out(static_cast<size_t>(ds.size() * ds.sample_length()));
  for (int64_t i = 0; i < ds.size(); ++i) ds.read(i, out.data() + i * ds.sample_length());
  return out;
}

std::vector<int64_t> read_samples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<int64_t> out;
  for (int64_t v; in.read(reinterpret_cast<char*>(&v), sizeof(v));) out.push_back(v);
  return out;
}

TEST(GPTDataset, GivesMegatronCoresSamplesInItsOrder) {
  ASSERT_FALSE(data_dir().empty()) << "ctest sets DS_MEGATRON_DATA";
  ds_test::TempDir cache("gpt_cache");
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<int64_t> want = read_samples(data_dir() + "/gpt_" + c.name + ".samples");
    ASSERT_FALSE(want.empty());
    dd::GPTDataset ds(corpus(), options_of(c, cache.path()));
    EXPECT_EQ(ds.size() * (c.sequence_length + 1), static_cast<int64_t>(want.size()));
    const std::vector<int64_t> got = all_samples(ds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "sample " << i / static_cast<size_t>(c.sequence_length + 1) << ", token "
                                 << i % static_cast<size_t>(c.sequence_length + 1);
    }
    if (c.num_samples > 0) {
      EXPECT_GE(ds.size(), c.num_samples);
    }
  }
}

TEST(GPTDataset, CachesItsIndicesAndRebuildsWhatDoesNotMatch) {
  ASSERT_FALSE(data_dir().empty()) << "ctest sets DS_MEGATRON_DATA";
  ds_test::TempDir cache("gpt_cache");
  const Case& c = kCases[1];
  const std::vector<int64_t> want = read_samples(data_dir() + "/gpt_" + c.name + ".samples");
  std::string path;
  {
    dd::GPTDataset built(corpus(), options_of(c, cache.path()));
    EXPECT_FALSE(built.loaded_from_cache());
    path = built.cache_path();
    EXPECT_TRUE(fs::exists(path));
  }
  {
    dd::GPTDataset again(corpus(), options_of(c, cache.path()));
    EXPECT_TRUE(again.loaded_from_cache());
    EXPECT_EQ(all_samples(again), want);
  }
  // Another seed: another index, in another file.
  dd::GPTDatasetOptions reseeded = options_of(c, cache.path());
  reseeded.seed = 4321;
  dd::GPTDataset other(corpus(), reseeded);
  EXPECT_FALSE(other.loaded_from_cache());
  EXPECT_NE(other.cache_path(), path);
  EXPECT_NE(all_samples(other), want);
  // A damaged cache file (cut short) and one whose header says another corpus: both built again, the samples right.
  fs::resize_file(path, fs::file_size(path) - 8);
  {
    dd::GPTDataset rebuilt(corpus(), options_of(c, cache.path()));
    EXPECT_FALSE(rebuilt.loaded_from_cache());
    EXPECT_EQ(all_samples(rebuilt), want);
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16);  // corpus_sequences
    const int64_t wrong = 48;
    f.write(reinterpret_cast<const char*>(&wrong), 8);
  }
  {
    dd::GPTDataset rebuilt(corpus(), options_of(c, cache.path()));
    EXPECT_FALSE(rebuilt.loaded_from_cache());
    EXPECT_EQ(all_samples(rebuilt), want);
  }
  // What a build killed mid-write leaves (a temporary file beside the index) is never read.
  fs::remove(path);
  std::ofstream(path + ".tmp.1.host") << "half an index";
  dd::GPTDataset fresh(corpus(), options_of(c, cache.path()));
  EXPECT_FALSE(fresh.loaded_from_cache());
  EXPECT_EQ(all_samples(fresh), want);
}

TEST(GPTDataset, RefusesOptionsItCannotServeByName) {
  ASSERT_FALSE(data_dir().empty()) << "ctest sets DS_MEGATRON_DATA";
  ds_test::TempDir cache("gpt_cache");
  auto refused = [&](dd::GPTDatasetOptions o, const std::string& says) {
    o.cache_dir = cache.path();
    try {
      dd::GPTDataset ds(corpus(), o);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const deepspeed::DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("megatron_uint16"), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  };
  dd::GPTDatasetOptions o;
  o.sequence_length = 1;
  refused(o, "sequence_length 1");
  o.sequence_length = 2000;
  refused(o, "fewer than one sample");
  o.sequence_length = 16;
  o.first_sequence = 30;
  o.end_sequence = 20;
  refused(o, "[30, 20)");
  o.first_sequence = 0;
  o.end_sequence = 50;
  refused(o, "[0, 50)");
  dd::GPTDataset ds(corpus(), options_of(kCases[0], cache.path()));
  EXPECT_THROW(ds.get(ds.size()), deepspeed::DataError);
}

// megatron_gpt_samples.py's BLENDS, as data paths over DS_MEGATRON_DATA.
struct Blend {
  const char* name;
  std::string path;
  int64_t sequence_length, num_samples;
  uint32_t seed;
};

TEST(BlendedDataset, GivesMegatronCoresBlendInItsOrder) {
  ASSERT_FALSE(data_dir().empty()) << "ctest sets DS_MEGATRON_DATA";
  const std::string a = data_dir() + "/megatron_uint16", b = data_dir() + "/megatron_int32";
  const Blend blends[] = {{"blend_30_70", "0.3 " + a + " 0.7 " + b, 16, 200, 1234},
                          {"blend_three", "2 " + a + " 1 " + b + " 1 " + a, 7, 150, 7},
                          {"blend_by_size", a + " " + b, 7, 500, 3}};
  ds_test::TempDir cache("blend_cache");
  for (const Blend& blend : blends) {
    SCOPED_TRACE(blend.name);
    dd::GPTDatasetOptions o;
    o.sequence_length = blend.sequence_length;
    o.num_samples = blend.num_samples;
    o.seed = blend.seed;
    o.cache_dir = cache.path();
    const auto ds = dd::build_gpt_dataset(blend.path, o);
    const std::vector<int64_t> want = read_samples(data_dir() + "/blend_" + blend.name + ".samples");
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(ds->size() * ds->sample_length(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(all_samples(*ds), want);
  }
}

TEST(BlendedDataset, RefusesABadDataPathByEntry) {
  auto refused = [](const std::string& path, const std::string& says) {
    try {
      dd::parse_data_path(path);
      ADD_FAILURE() << "accepted \"" << path << "\"";
    } catch (const deepspeed::DataError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("   ", "empty");
  refused("0.5 corpusA 0.5", "'0.5' has no corpus prefix");
  refused("corpusA 0.3", "'0.3' looks like a weight");
  refused("-1 corpusA 2 corpusB", "'-1' (before 'corpusA') is not a positive weight");
  refused("0.5 0.5 corpusA x", "'0.5' follows a weight");
  const dd::DataPath p = dd::parse_data_path("30 a 10 b");
  EXPECT_EQ(p.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.weights, (std::vector<double>{0.75, 0.25}));
  EXPECT_TRUE(dd::parse_data_path("a b").weights.empty());
  dd::GPTDatasetOptions o;
  o.sequence_length = 16;
  try {
    dd::build_gpt_dataset("0.5 " + data_dir() + "/megatron_uint16 0.5 " + data_dir() + "/megatron_int32", o);
    ADD_FAILURE() << "a blend without a sample count";
  } catch (const deepspeed::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("number of samples must be given"), std::string::npos) << e.what();
  }
}

}  // namespace

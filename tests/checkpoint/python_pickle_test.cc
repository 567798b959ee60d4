// The reader of Python-written torch.save files (checkpoint/python_pickle.h), and its way back (the writer): Python's torch.save writes a file
// holding each kind of value DeepSpeed's checkpoints carry (OrderedDict, torch.Size, tensors of several dtypes
// sharing a storage at offsets and strides, a Parameter, DeepSpeed's loss scaler and ZeroStageEnum, large and
// negative ints), and our reader must give back the same values; a class it cannot map is refused by name.
#include "checkpoint/python_pickle.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "checkpoint/archive_writer.h"
#include "checkpoint/python_pickle_writer.h"
#include "deepspeed/checkpoint.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ds_test::TempDir;

namespace {

const std::string kPython = DS_TEST_PYTHON;

// Runs `body` in Python with `out` as sys.argv[1]; true when it exited 0.
bool run_python(const TempDir& tmp, const std::string& body, const std::string& out) {
  const std::string script = tmp.path() + "/make.py";
  std::ofstream(script) << "import sys, collections, torch\n" << body;
  return std::system((kPython + " " + script + " " + out + " > " + tmp.path() + "/py.log 2>&1").c_str()) == 0;
}

c10::IValue at_key(const c10::IValue& dict, const std::string& key) {
  EXPECT_TRUE(dict.isGenericDict());
  c10::impl::GenericDict d = dict.toGenericDict();
  auto it = d.find(key);
  EXPECT_NE(it, d.end()) << key;
  return it == d.end() ? c10::IValue() : it->value();
}

}  // namespace

TEST(PythonPickle, ReadsWhatTorchSaveWritesFromPython) {
  TempDir tmp;
  const std::string file = tmp.path() + "/values.pt";
  ASSERT_TRUE(run_python(tmp,
                         "base = torch.arange(24, dtype=torch.float32)\n"
                         "s = collections.OrderedDict()\n"
                         "s['b_first'] = 1\n"
                         "s['a_second'] = -(2 ** 40)\n"
                         "s['shape'] = torch.Size([3, 4])\n"
                         "s['view'] = base[2:14].view(3, 4)\n"
                         "s['strided'] = base.view(4, 6)[:, 1::2]\n"
                         "s['same_storage'] = base\n"
                         "s['bf16'] = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)\n"
                         "s['ids'] = torch.tensor([7, -9], dtype=torch.int64)\n"
                         "s['param'] = torch.nn.Parameter(torch.ones(2))\n"
                         "s['nested'] = {'list': [1, 2.5, 'x', None, True], 'tuple': (1, (2, 3))}\n"
                         "s['big'] = 2 ** 62\n"
                         "flat = torch.full((5,), 0.25)\n"
                         "flat.ds_id = 7  # a Python attribute: pickled through _rebuild_from_type_v2\n"
                         "s['with_attrs'] = flat\n"
                         "torch.save(s, sys.argv[1])\n",
                         file))
      << kPython << " could not write the file (run scripts/setup.sh)";
  const c10::IValue v = ckpt::load_python_torch_file(file);
  ASSERT_TRUE(v.isGenericDict());
  c10::impl::GenericDict d = v.toGenericDict();
  std::vector<std::string> keys;
  for (const auto& kv : d) keys.push_back(kv.key().toStringRef());
  EXPECT_EQ(keys.front(), "b_first");  // insertion order, not sorted
  EXPECT_EQ(keys[1], "a_second");
  EXPECT_EQ(at_key(v, "b_first").toInt(), 1);
  EXPECT_EQ(at_key(v, "a_second").toInt(), -(int64_t{1} << 40));
  EXPECT_EQ(at_key(v, "big").toInt(), int64_t{1} << 62);
  const auto shape = at_key(v, "shape").toTupleRef().elements();
  ASSERT_EQ(shape.size(), 2u);
  EXPECT_EQ(shape[0].toInt(), 3);
  EXPECT_EQ(shape[1].toInt(), 4);

  const at::Tensor base = at::arange(24, at::kFloat);
  const at::Tensor view = at_key(v, "view").toTensor();
  EXPECT_TRUE(view.equal(base.narrow(0, 2, 12).view({3, 4})));
  const at::Tensor strided = at_key(v, "strided").toTensor();
  EXPECT_TRUE(strided.equal(base.view({4, 6}).slice(1, 1, 6, 2)));
  const at::Tensor same = at_key(v, "same_storage").toTensor();
  EXPECT_TRUE(same.equal(base));
  // One storage behind the three, as in Python.
  EXPECT_EQ(view.storage().data(), same.storage().data());
  EXPECT_EQ(strided.storage().data(), same.storage().data());
  const at::Tensor bf16 = at_key(v, "bf16").toTensor();
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(bf16.to(at::kFloat).equal(at::tensor({1.5f, -2.0f})));
  EXPECT_TRUE(at_key(v, "ids").toTensor().equal(at::tensor({int64_t{7}, int64_t{-9}})));
  EXPECT_TRUE(at_key(v, "param").toTensor().equal(at::ones({2})));
  EXPECT_TRUE(at_key(v, "with_attrs").toTensor().equal(at::full({5}, 0.25)));

  const c10::IValue nested = at_key(v, "nested");
  const c10::List<c10::IValue> list = at_key(nested, "list").toList();
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(list.get(0).toInt(), 1);
  EXPECT_EQ(list.get(1).toDouble(), 2.5);
  EXPECT_EQ(list.get(2).toStringRef(), "x");
  EXPECT_TRUE(list.get(3).isNone());
  EXPECT_TRUE(list.get(4).toBool());
  const auto tuple = at_key(nested, "tuple").toTupleRef().elements();
  ASSERT_EQ(tuple.size(), 2u);
  EXPECT_EQ(tuple[1].toTupleRef().elements()[1].toInt(), 3);
}

// DeepSpeed's own objects in its zero files: the loss scaler (an object: its attributes), ZeroStageEnum (its
// value) and a tensor-fragment address.
TEST(PythonPickle, MapsDeepSpeedsLossScalerEnumAndFragmentAddress) {
  TempDir tmp;
  const std::string file = tmp.path() + "/ds.pt";
  ASSERT_TRUE(run_python(tmp,
                         "from deepspeed.runtime.fp16.loss_scaler import LossScaler\n"
                         "from deepspeed.runtime.zero.config import ZeroStageEnum\n"
                         "from deepspeed.utils.tensor_fragment import fragment_address\n"
                         "torch.save({'optimizer_state_dict': {'loss_scaler': LossScaler(scale=4.0),\n"
                         "            'zero_stage': ZeroStageEnum.gradients, 'stage3': ZeroStageEnum.weights,\n"
                         "            'addr': fragment_address(numel=128, start=16)}}, sys.argv[1])\n",
                         file))
      << kPython << " could not write the file with DeepSpeed's classes (run scripts/setup.sh)";
  const c10::IValue osd = at_key(ckpt::load_python_torch_file(file), "optimizer_state_dict");
  EXPECT_EQ(at_key(osd, "zero_stage").toInt(), 2);
  EXPECT_EQ(at_key(osd, "stage3").toInt(), 3);
  const c10::IValue scaler = at_key(osd, "loss_scaler");
  EXPECT_EQ(at_key(scaler, "__class__").toStringRef(), "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  EXPECT_EQ(at_key(scaler, "cur_scale").toDouble(), 4.0);
  const c10::IValue addr = at_key(osd, "addr");
  EXPECT_EQ(at_key(addr, "numel").toInt(), 128);
  EXPECT_EQ(at_key(addr, "start").toInt(), 16);
}

// DeepSpeed's fp16 loss scaler keeps the dtype it scales (torch.float16): a torch dtype as a value reads as its name;
// a function used as a value is still refused.
TEST(PythonPickle, ATorchDtypeValueIsItsName) {
  TempDir tmp;
  const std::string file = tmp.path() + "/dtype.pt";
  ASSERT_TRUE(run_python(tmp, "torch.save({'dtype': torch.float16, 'other': torch.bfloat16}, sys.argv[1])\n", file));
  const c10::IValue v = ckpt::load_python_torch_file(file);
  EXPECT_EQ(at_key(v, "dtype").toStringRef(), "torch.float16");
  EXPECT_EQ(at_key(v, "other").toStringRef(), "torch.bfloat16");
  const std::string fn = tmp.path() + "/fn.pt";
  ASSERT_TRUE(run_python(tmp, "import os\ntorch.save({'f': os.getcwd}, sys.argv[1])\n", fn));
  EXPECT_THROW(ckpt::load_python_torch_file(fn), ckpt::CheckpointError);
}

TEST(PythonPickle, AnUnknownClassIsRefusedByName) {
  TempDir tmp;
  const std::string file = tmp.path() + "/ns.pt";
  ASSERT_TRUE(run_python(tmp, "import argparse\ntorch.save({'args': argparse.Namespace(lr=1)}, sys.argv[1])\n", file));
  try {
    ckpt::load_python_torch_file(file);
    FAIL() << "an argparse.Namespace was mapped";
  } catch (const ckpt::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint file " + file + ": cannot map Python class argparse.Namespace"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(PythonPickle, ATruncatedPickleIsAnErrorNotACrash) {
  // A protocol-2 pickle of {'a': 1} cut inside its SETITEM: every prefix must fail cleanly.
  const std::string full("\x80\x02}q\x00X\x01\x00\x00\x00" "aq\x01K\x01s.", 17);
  for (size_t n = 0; n + 1 < full.size(); ++n) {
    EXPECT_THROW(ckpt::read_python_pickle(full.data(), n, nullptr, "cut.pkl"), ckpt::CheckpointError) << n;
  }
  const c10::IValue whole = ckpt::read_python_pickle(full.data(), full.size(), nullptr, "whole.pkl");
  EXPECT_EQ(at_key(whole, "a").toInt(), 1);
}
// DeepSpeed's own checkpoint files, written by DeepSpeed itself (one rank, CPU accelerator, a 2-layer MLP of 212
// parameters, torch's Adam, one step): stage 0 fp32, stage 2 bf16, stage 3 fp32. Every file reads, and what a loader will need is
// there with the right values: the module's tensors, the stage, the fp32 partitions equal to the model's weights.
TEST(PythonPickle, ReadsDeepSpeedsOwnCheckpoints) {
  TempDir tmp;
  ASSERT_TRUE(run_python(tmp,
                         "import os\n"
                         "os.environ.update(DS_ACCELERATOR='cpu', MASTER_ADDR='127.0.0.1', RANK='0', WORLD_SIZE='1',\n"
                         "                  LOCAL_RANK='0', MASTER_PORT=str(29000 + os.getpid() % 1000),\n"
                         "                  TORCH_EXTENSIONS_DIR=sys.argv[1] + '/torch_extensions')\n"
                         "import deepspeed, deepspeed.comm.torch\n"
                         "# No JIT-built ops (minutes on a fresh machine): DeepSpeed's shared-memory all-reduce op\n"
                         "# is an inference speed-up, and torch's Adam replaces its fused one.\n"
                         "sys.modules['deepspeed.comm.torch'].build_shm_op = lambda: None  # deepspeed.comm.torch is torch\n"
                         "for stage, bf16 in ((0, False), (2, True), (3, False)):\n"
                         "    torch.manual_seed(0)\n"
                         "    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))\n"
                         "    cfg = {'train_micro_batch_size_per_gpu': 2, 'steps_per_print': 1000,\n"
                         "           'zero_optimization': {'stage': stage}, 'bf16': {'enabled': bf16}}\n"
                         "    opt = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
                         "    eng, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)\n"
                         "    x = torch.randn(2, 8, dtype=torch.bfloat16 if bf16 else torch.float32)\n"
                         "    eng.backward(eng(x).float().pow(2).mean())\n"
                         "    eng.step()\n"
                         "    eng.save_checkpoint(sys.argv[1] + '/s%d' % stage, tag='t')\n",
                         tmp.path()))
      << kPython << " could not run DeepSpeed (see " << tmp.path() << "/py.log; run scripts/setup.sh)";
  constexpr int64_t kParams = 8 * 16 + 16 + 16 * 4 + 4;

  // Stage 0: the model file holds everything; the module's tensors are the weights.
  const c10::IValue s0 = ckpt::load_python_torch_file(tmp.path() + "/s0/t/mp_rank_00_model_states.pt");
  EXPECT_EQ(at_key(s0, "global_steps").toInt(), 1);
  EXPECT_TRUE(at_key(s0, "ds_version").isString());
  const at::Tensor w0 = at_key(at_key(s0, "module"), "0.weight").toTensor();
  EXPECT_EQ(w0.sizes(), (std::vector<int64_t>{16, 8}));
  EXPECT_TRUE(at_key(s0, "param_shapes").isNone());  // DeepSpeed records them with ZeRO only
  EXPECT_TRUE(at_key(s0, "optimizer").isGenericDict());

  // Stage 2, bf16 (DeepSpeed names its zero files bf16_zero_pp_rank_*): the fp32 partition (one rank: the whole
  // group, maybe padded) rounds to the module's bf16 weights.
  const c10::IValue m2 = ckpt::load_python_torch_file(tmp.path() + "/s2/t/mp_rank_00_model_states.pt");
  const auto shapes = at_key(m2, "param_shapes").toList();  // one OrderedDict of torch.Size per group
  ASSERT_EQ(shapes.size(), 1u);
  const auto first_shape = at_key(shapes.get(0), "0.weight").toTupleRef().elements();
  ASSERT_EQ(first_shape.size(), 2u);
  EXPECT_EQ(first_shape[0].toInt(), 16);
  EXPECT_EQ(first_shape[1].toInt(), 8);
  const c10::IValue o2 = at_key(ckpt::load_python_torch_file(tmp.path() + "/s2/t/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                                "optimizer_state_dict");
  EXPECT_EQ(at_key(o2, "zero_stage").toInt(), 2);
  EXPECT_EQ(at_key(at_key(o2, "loss_scaler"), "__class__").toStringRef(),
            "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  const at::Tensor fp32 = at_key(o2, "single_partition_of_fp32_groups").toList().get(0).toTensor();
  ASSERT_GE(fp32.numel(), kParams);
  std::vector<at::Tensor> module_params;
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias"})
    module_params.push_back(at_key(at_key(m2, "module"), name).toTensor().reshape({-1}));
  const at::Tensor module_flat = at::cat(module_params);
  EXPECT_EQ(module_flat.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(fp32.narrow(0, 0, kParams).to(at::kBFloat16).equal(module_flat));

  // Stage 3: one model file per rank, and the fp32 partition of all 212 parameters in the zero file.
  const c10::IValue o3 = at_key(ckpt::load_python_torch_file(tmp.path() + "/s3/t/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                                "optimizer_state_dict");
  EXPECT_EQ(at_key(o3, "zero_stage").toInt(), 3);
  EXPECT_EQ(at_key(o3, "partition_count").toInt(), 1);
  EXPECT_EQ(at_key(o3, "fp32_flat_groups").toList().get(0).toTensor().numel(), kParams);
  EXPECT_NO_THROW(ckpt::load_python_torch_file(tmp.path() + "/s3/t/zero_pp_rank_0_mp_rank_00_model_states.pt"));
}

// The writer (checkpoint/python_pickle_writer.h): Python's torch.load must read each kind of value DeepSpeed's
// loaders want as the Python object it is (a LossScaler instance, ZeroStageEnum member, torch.Size, OrderedDict,
// a dict keyed by int, tensors of several dtypes including a strided view), and our reader must read it back.
TEST(PythonPickle, PythonReadsWhatTheWriterWrites) {
  TempDir tmp;
  const std::string file = tmp.path() + "/written.pt";
  c10::impl::GenericDict scaler_attrs = ckpt::make_any_dict();
  scaler_attrs.insert(std::string("cur_scale"), 1.0);
  scaler_attrs.insert(std::string("dynamic"), false);
  c10::impl::GenericDict items = ckpt::make_any_dict();
  items.insert(std::string("z_first"), int64_t{1});
  items.insert(std::string("a_second"), ckpt::py_size({3, 4}));
  c10::impl::GenericDict by_int = ckpt::make_any_dict();
  by_int.insert(int64_t{0}, std::string("zero"));
  by_int.insert(int64_t{300}, -1.5);
  c10::impl::GenericDict addr = ckpt::make_any_dict();
  addr.insert(std::string("numel"), int64_t{128});
  addr.insert(std::string("start"), int64_t{16});
  const at::Tensor base = at::arange(24, at::kFloat);
  c10::impl::GenericDict v = ckpt::make_any_dict();
  v.insert(std::string("scaler"), ckpt::py_object("deepspeed.runtime.fp16.loss_scaler.LossScaler", scaler_attrs));
  v.insert(std::string("stage"), ckpt::py_call("deepspeed.runtime.zero.config.ZeroStageEnum", {int64_t{2}}));
  v.insert(std::string("ordered"), ckpt::py_ordered_dict(items));
  v.insert(std::string("by_int"), by_int);
  v.insert(std::string("addr"), ckpt::py_object("deepspeed.utils.tensor_fragment.fragment_address", addr));
  v.insert(std::string("ints"), c10::ivalue::Tuple::create({int64_t{-(int64_t{1} << 40)}, int64_t{70000},
                                                            int64_t{-3}, int64_t{255}, true, c10::IValue()}));
  v.insert(std::string("view"), base.view({4, 6}).narrow(1, 1, 3));
  v.insert(std::string("bf16"), at::tensor({1.5, -2.0}).to(at::kBFloat16));
  v.insert(std::string("empty"), at::empty({0}, at::kFloat));
  {
    std::ofstream out(file, std::ios::binary);
    ckpt::write_python_archive(v, [&](const char* d, size_t n) { out.write(d, static_cast<std::streamsize>(n)); });
  }
  ASSERT_TRUE(run_python(
      tmp,
      "from deepspeed.runtime.fp16.loss_scaler import LossScaler\n"
      "from deepspeed.runtime.zero.config import ZeroStageEnum\n"
      "from deepspeed.utils.tensor_fragment import fragment_address\n"
      "v = torch.load(sys.argv[1], weights_only=False)\n"
      "assert isinstance(v['scaler'], LossScaler) and v['scaler'].loss_scale == 1.0, v['scaler']\n"
      "assert v['stage'] is ZeroStageEnum.gradients, v['stage']\n"
      "assert type(v['ordered']) is collections.OrderedDict and list(v['ordered']) == ['z_first', 'a_second']\n"
      "assert type(v['ordered']['a_second']) is torch.Size and v['ordered']['a_second'] == (3, 4)\n"
      "assert v['by_int'] == {0: 'zero', 300: -1.5}, v['by_int']\n"
      "assert isinstance(v['addr'], fragment_address) and (v['addr'].numel, v['addr'].start) == (128, 16)\n"
      "assert v['ints'] == (-(2 ** 40), 70000, -3, 255, True, None), v['ints']\n"
      "assert torch.equal(v['view'], torch.arange(24.).view(4, 6)[:, 1:4]), v['view']\n"
      "assert v['bf16'].dtype == torch.bfloat16 and v['bf16'].tolist() == [1.5, -2.0]\n"
      "assert v['empty'].shape == (0,)\n",
      file))
      << "Python could not read the file back: " << tmp.path() << "/py.log";
  const c10::IValue back = ckpt::load_python_torch_file(file);
  EXPECT_EQ(at_key(back, "stage").toInt(), 2);
  EXPECT_EQ(at_key(at_key(back, "scaler"), "cur_scale").toDouble(), 1.0);
  EXPECT_EQ(at_key(at_key(back, "addr"), "start").toInt(), 16);
  EXPECT_TRUE(at::equal(at_key(back, "view").toTensor(), base.view({4, 6}).narrow(1, 1, 3)));
  const auto shape = at_key(at_key(back, "ordered"), "a_second").toTupleRef().elements();
  ASSERT_EQ(shape.size(), 2u);
  EXPECT_EQ(shape[1].toInt(), 4);
}

TEST(PythonPickle, TheWriterRefusesWhatPythonCannotHold) {
  std::vector<at::Tensor> storages;
  EXPECT_THROW(ckpt::write_python_pickle(c10::IValue(at::tensor({1.0}, at::kComplexFloat)), &storages),
               ckpt::CheckpointError);
  EXPECT_THROW(ckpt::write_python_pickle(ckpt::py_call("NoModule", {}), &storages), ckpt::CheckpointError);
}

// Precompiled header for the LibTorch-heavy targets: ATen and nn::Module take ~8 s to parse on this machine, so
// parse them once (CMakeLists.txt, ds_add_pch). Sources still include what they use; this only makes it cheaper.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

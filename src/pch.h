// Precompiled header for the LibTorch-heavy targets: ATen is ~8 s to parse on this machine, so parse it once.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

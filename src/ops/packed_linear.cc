// PackedLinear: LibTorch's oneDNN linear ops, reached through the dispatcher by their registered names (they have
// no C++ function of their own in ATen's headers). A LibTorch without them (built without oneDNN), or whose
// signatures differ, packs nothing.
#include "deepspeed/ops/packed_linear.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "deepspeed/error.h"

namespace deepspeed::ops {
namespace {

using ReorderFn = at::Tensor(const at::Tensor&, std::optional<int64_t>);
using LinearFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>);

struct OneDnnLinearOps {
  std::optional<c10::TypedOperatorHandle<ReorderFn>> reorder;
  std::optional<c10::TypedOperatorHandle<LinearFn>> linear;
  bool bf16 = false;  // oneDNN's bfloat16 kernels run on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT, not capped)
};

const OneDnnLinearOps& onednn_ops() {
  static const OneDnnLinearOps ops = [] {
    OneDnnLinearOps o;
    auto& d = c10::Dispatcher::singleton();
    const auto reorder = d.findOp({"mkldnn::_reorder_linear_weight", ""});
    const auto linear = d.findOp({"mkldnn::_linear_pointwise", ""});
    if (!reorder || !linear || !reorder->hasKernelForDispatchKey(c10::DispatchKey::CPU)) return o;
    try {  // typed() checks the signature: a LibTorch whose ops changed shape packs nothing
      o.linear = linear->typed<LinearFn>();
      o.reorder = reorder->typed<ReorderFn>();
      if (const auto bf16 = d.findOp({"mkldnn::_is_mkldnn_bf16_supported", ""})) o.bf16 = bf16->typed<bool()>().call();
    } catch (const c10::Error&) {
      o.reorder.reset();
    }
    return o;
  }();
  return ops;
}

// Below this many elements (256 x 256) oneDNN's fixed cost per call (about 8 us here against LibTorch's 1-2 us)
// outweighs MKL's copy of the weight: bench_packed_linear's tiny shape runs 2-5x slower packed at 1-16 rows.
constexpr int64_t kMinPackedElements = 256 * 256;

// DS_PACKED_LINEAR: "0" packs nothing, "1" every weight it can (the small ones too), unset or empty the large enough
// ones; anything else is refused.
bool wanted(const at::Tensor& weight) {
  const char* v = std::getenv("DS_PACKED_LINEAR");
  if (v == nullptr || *v == '\0') return weight.numel() >= kMinPackedElements;
  DS_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0,
           "DS_PACKED_LINEAR must be 0 (no packed weights) or 1 (every weight packed), got \"", v, "\"");
  return *v == '1';
}

}  // namespace

bool packs_linear_weights(const at::Tensor& weight) {
  const OneDnnLinearOps& ops = onednn_ops();
  return weight.defined() && weight.dim() == 2 && weight.device().is_cpu() && weight.layout() == at::kStrided &&
         (weight.scalar_type() == at::kFloat || (weight.scalar_type() == at::kBFloat16 && ops.bf16)) &&
         ops.reorder.has_value() && wanted(weight);  // last: a bad DS_PACKED_LINEAR is refused where it applies
}

void PackedLinear::pack(const at::Tensor& weight, const at::Tensor& bias, std::vector<at::Tensor> sources) {
  weight_ = bias_ = packed_ = at::Tensor();
  sources_.clear();  // after `sources` was taken by value: a repack may pass sources_ itself
  versions_.clear();
  if (!packs_linear_weights(weight)) return;
  weight_ = weight;
  bias_ = bias;
  sources_ = sources.empty() ? std::vector<at::Tensor>{weight} : std::move(sources);
  for (const at::Tensor& s : sources_) versions_.push_back(s._version());
  packed_ = onednn_ops().reorder->call(weight.detach().contiguous(), std::nullopt);
}

bool PackedLinear::stale() const {
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i]._version() != versions_[i]) return true;
  return false;
}

at::Tensor PackedLinear::operator()(const at::Tensor& x) {
  DS_CHECK(packed(), "PackedLinear: called without a packed weight");
  if (stale()) {  // changed in place since: pack the new values (pack() clears the members first)
    const at::Tensor weight = weight_, bias = bias_;
    pack(weight, bias, sources_);
  }
  const std::optional<at::Tensor> bias = bias_.defined() ? std::optional<at::Tensor>(bias_) : std::nullopt;
  return onednn_ops().linear->call(x, packed_, bias, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace deepspeed::ops

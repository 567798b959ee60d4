#include "pipe/p2p.h"

#include <ATen/ATen.h>

#include <utility>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::pipe {
namespace {

// [dtype, ndim, dims...]: enough for any activation a layer passes on.
constexpr int64_t kMaxDims = 8;
constexpr int64_t kMetaLen = 2 + kMaxDims;

}  // namespace

P2PLink::P2PLink(comm::ProcessGroup world, int peer, std::string what)
    : world_(std::move(world)), peer_(peer), what_(std::move(what)) {}

void P2PLink::send(const at::Tensor& t) {
  DS_CHECK(t.defined(), "pipeline: nothing to send as ", what_);
  if (!negotiated_) {
    DS_CHECK(t.dim() <= kMaxDims, "pipeline: ", what_, " have ", t.dim(), " dimensions; at most ", kMaxDims,
             " are supported");
    at::Tensor meta = at::zeros({kMetaLen}, at::kLong);
    auto m = meta.accessor<int64_t, 1>();
    m[0] = static_cast<int64_t>(t.scalar_type());
    m[1] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) m[2 + d] = t.size(d);
    world_.send(meta, peer_);
    dtype_ = t.scalar_type();
    shape_ = t.sizes().vec();
    negotiated_ = true;
  } else {
    DS_CHECK(t.scalar_type() == dtype_ && t.sizes().vec() == shape_, "pipeline: ", what_, " changed from ",
             at::IntArrayRef(shape_), " ", c10::toString(dtype_), " to ", t.sizes(), " ",
             c10::toString(t.scalar_type()),
             "; every micro-batch of a pipeline run must have the same shape and dtype");
  }
  world_.send(t.contiguous(), peer_);
}

at::Tensor P2PLink::recv(at::Tensor& buffer) {
  if (!negotiated_) {
    at::Tensor meta = at::zeros({kMetaLen}, at::kLong);
    world_.recv(meta, peer_);
    auto m = meta.accessor<int64_t, 1>();
    DS_CHECK(m[1] >= 0 && m[1] <= kMaxDims, "pipeline: malformed announcement for ", what_);
    dtype_ = static_cast<at::ScalarType>(m[0]);
    shape_.assign(&m[2], &m[2] + m[1]);
    negotiated_ = true;
  }
  if (!buffer.defined()) buffer = empty_like_announced();
  world_.recv(buffer, peer_);
  return buffer;
}

at::Tensor P2PLink::empty_like_announced() const {
  DS_ASSERT(negotiated_, "no announcement yet");
  // Activations and their gradients live on the model's device.
  return at::empty(shape_, at::TensorOptions().dtype(dtype_).device(accelerator::get_accelerator().device()));
}

}  // namespace deepspeed::pipe

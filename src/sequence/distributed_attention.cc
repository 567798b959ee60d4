// Ulysses' all-to-all and DistributedAttention (deepspeed/sequence/layer.h), and the sequence-parallel groups.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>
#include <vector>

#include "comm/mesh.h"
#include "comm/group_capsule.h"
#include "deepspeed/error.h"
#include "deepspeed/sequence/layer.h"

namespace deepspeed::sequence {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor exchange(const at::Tensor& x, comm::ProcessGroup& group, int64_t scatter_dim, int64_t gather_dim) {
  const int64_t p = group.size();
  // [.., S, ..] -> [P, .., S/P, ..]: chunk j leads, so all_to_all_single sends it to rank j.
  const at::Tensor chunks = x.unflatten(scatter_dim, {p, x.size(scatter_dim) / p}).movedim(scatter_dim, 0).contiguous();
  at::Tensor received = at::empty_like(chunks);
  group.all_to_all_single(received, chunks);
  // received[i] came from rank i: put the rank index just before gather_dim and merge the two, rank-major.
  return received.movedim(0, gather_dim).flatten(gather_dim, gather_dim + 1);
}

struct AllToAll : public torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group,
                            int64_t scatter_dim, int64_t gather_dim) {
    ctx->saved_data["group"] = comm::group_capsule(group);
    ctx->saved_data["scatter"] = scatter_dim;
    ctx->saved_data["gather"] = gather_dim;
    comm::ProcessGroup g = group;  // a handle: copies share the group
    return exchange(x, g, scatter_dim, gather_dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t scatter = ctx->saved_data["scatter"].toInt(), gather = ctx->saved_data["gather"].toInt();
    return {exchange(grads[0], comm::capsule_group(ctx->saved_data["group"]), gather, scatter), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SequenceParallelGroups sequence_parallel_groups(int sp_size) {
  const comm::GridGroups grid = comm::grid_groups("sequence_parallel", "sequence_parallel_size", sp_size);
  SequenceParallelGroups g;
  g.sp_size = sp_size;
  g.sequence_parallel = grid.inner;
  g.data_parallel = grid.outer;
  return g;
}

at::Tensor seq_all_to_all(const at::Tensor& x, const comm::ProcessGroup& group, int64_t scatter_dim,
                          int64_t gather_dim) {
  DS_CHECK(group.is_member(), "sequence parallelism: this rank is not in the group ", group.name());
  scatter_dim = c10::maybe_wrap_dim(scatter_dim, x.dim());
  gather_dim = c10::maybe_wrap_dim(gather_dim, x.dim());
  DS_CHECK(scatter_dim != gather_dim, "seq_all_to_all: scatter and gather dimensions must differ, both are ",
           scatter_dim);
  DS_CHECK(x.size(scatter_dim) % group.size() == 0, "seq_all_to_all: dimension ", scatter_dim, " (", x.size(scatter_dim),
           ") must divide by the sequence-parallel size (", group.size(), ")");
  if (group.size() == 1) return x;
  return AllToAll::apply(x, group, scatter_dim, gather_dim);
}

DistributedAttentionImpl::DistributedAttentionImpl(LocalAttention local_attention, comm::ProcessGroup group,
                                                   int64_t scatter_idx, int64_t gather_idx)
    : local_(std::move(local_attention)), group_(std::move(group)), scatter_idx_(scatter_idx), gather_idx_(gather_idx) {
  DS_CHECK(local_ != nullptr, "DistributedAttention: the local attention is empty");
  DS_CHECK(group_.is_member(), "DistributedAttention: this rank is not in the sequence-parallel group ", group_.name());
}

at::Tensor DistributedAttentionImpl::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t heads = q.size(scatter_idx_);
  DS_CHECK(heads % group_.size() == 0, "DistributedAttention: heads (", heads,
           ") must divide by the sequence-parallel size (", group_.size(), ")");
  DS_CHECK(k.size(scatter_idx_) % group_.size() == 0 && v.size(scatter_idx_) % group_.size() == 0,
           "DistributedAttention: key / value heads (", k.size(scatter_idx_), ", ", v.size(scatter_idx_),
           ") must divide by the sequence-parallel size (", group_.size(), ")");
  const at::Tensor ql = seq_all_to_all(q, group_, scatter_idx_, gather_idx_);
  const at::Tensor kl = seq_all_to_all(k, group_, scatter_idx_, gather_idx_);
  const at::Tensor vl = seq_all_to_all(v, group_, scatter_idx_, gather_idx_);
  return seq_all_to_all(local_(ql, kl, vl), group_, gather_idx_, scatter_idx_);
}

}  // namespace deepspeed::sequence

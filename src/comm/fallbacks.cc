// See fallbacks.h.
#include "comm/fallbacks.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace deepspeed::comm::detail {

bool Backend::supports_reduce_dtype(at::ScalarType dtype) const {
  const auto& dtypes = capabilities().reduce_dtypes;
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

namespace {

using ::deepspeed::detail::str_cat;

at::Tensor contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// A 1-D uint8 view of a contiguous tensor's bytes.
at::Tensor as_bytes(const at::Tensor& t) {
  if (t.scalar_type() == at::kByte) return t.view({t.numel()});
  if (t.numel() == 0) return at::empty({0}, t.options().dtype(at::kByte));
  return t.view({t.numel()}).view(at::kByte);
}

// A [rows, row_bytes] uint8 view, so all-to-all splits stay counted in rows of dim 0.
at::Tensor as_byte_rows(const at::Tensor& t) {
  int64_t rows = t.size(0);
  int64_t row_bytes = rows == 0 ? 0 : t.numel() / rows * static_cast<int64_t>(t.element_size());
  return as_bytes(t).view({rows, row_bytes});
}

// An output buffer the backend can write: `t` itself when contiguous, else a staging copy;
// `copy_back` says whether finalize must copy it into `t`.
at::Tensor output_buffer(const at::Tensor& t, bool& copy_back) {
  copy_back = !t.is_contiguous();
  return copy_back ? at::empty(t.sizes(), t.options()) : t;
}

// Several backend operations that finish as one (the per-owner forms): waits for each in issue order.
class WorkSet : public BackendWork {
 public:
  explicit WorkSet(std::vector<BackendWorkPtr> works) : works_(std::move(works)) {}
  void wait() override {
    for (BackendWorkPtr& w : works_) w->wait();
  }
  bool is_completed() override {
    return std::all_of(works_.begin(), works_.end(), [](const BackendWorkPtr& w) { return w->is_completed(); });
  }

 private:
  std::vector<BackendWorkPtr> works_;
};

struct ReduceBuffers {
  at::Tensor buf;  // what the backend reduces
  ReduceOp native_op;
  bool divide = false;
  bool copy_back = false;
};

// Chooses staging dtype and native op for an in-place reduction of `t`.
ReduceBuffers plan_reduction(const Backend& b, const at::Tensor& t, ReduceOp op, const char* name) {
  ReduceBuffers r;
  DS_CHECK_T(CommError, op != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()), name,
             ": AVG needs a floating dtype, got ", c10::toString(t.scalar_type()));
  bool native_dtype = b.supports_reduce_dtype(t.scalar_type());
  DS_CHECK_T(CommError, native_dtype || at::isFloatingType(t.scalar_type()), name, ": dtype ",
             c10::toString(t.scalar_type()), " cannot be reduced on backend ", b.name(),
             " (use float, half, bfloat16, double, int8/32/64 or uint8)");
  if (!native_dtype) {
    r.buf = t.to(at::kFloat);  // bfloat16: reduce in fp32, copy back
    r.copy_back = true;
  } else if (!t.is_contiguous()) {
    r.buf = t.contiguous();
    r.copy_back = true;
  } else {
    r.buf = t;
  }
  r.native_op = op;
  if (op == ReduceOp::kAvg && !b.supports_reduce_op(ReduceOp::kAvg)) {
    r.native_op = ReduceOp::kSum;
    r.divide = true;
  }
  return r;
}

// Reduces the n rows of `rows` ([n, m]) into one row of m, in fp32 for half types.
at::Tensor reduce_rows(const at::Tensor& rows, ReduceOp op, at::ScalarType out_type) {
  bool half = out_type == at::kHalf || out_type == at::kBFloat16;
  at::Tensor x = half ? rows.to(at::kFloat) : rows;
  at::Tensor r;
  switch (op) {
    case ReduceOp::kSum:
      r = at::sum(x, {0}, false, x.scalar_type());
      break;
    case ReduceOp::kAvg:
      r = at::sum(x, {0}) / rows.size(0);
      break;
    case ReduceOp::kMax:
      r = std::get<0>(x.max(0));
      break;
    case ReduceOp::kMin:
      r = std::get<0>(x.min(0));
      break;
    case ReduceOp::kProduct:
      r = at::prod(x, 0, false, x.scalar_type());
      break;
  }
  return r.to(out_type);
}

}  // namespace

Pending run_all_reduce(Backend& b, const at::Tensor& t, ReduceOp op, int n) {
  ReduceBuffers r = plan_reduction(b, t, op, "all_reduce");
  Pending p;
  p.work = b.all_reduce(r.buf, r.native_op);
  if (r.divide || r.copy_back) {
    p.finalize = [t, r, n] {
      if (r.divide) r.buf.div_(n);
      if (r.copy_back) t.copy_(r.buf);
    };
  }
  return p;
}

Pending run_reduce(Backend& b, const at::Tensor& t, int root, bool is_root, ReduceOp op, int n) {
  ReduceBuffers r = plan_reduction(b, t, op, "reduce");
  Pending p;
  p.work = b.reduce(r.buf, root, r.native_op);
  if (is_root && (r.divide || r.copy_back)) {
    p.finalize = [t, r, n] {
      if (r.divide) r.buf.div_(n);
      if (r.copy_back) t.copy_(r.buf);
    };
  }
  return p;
}

Pending run_broadcast(Backend& b, const at::Tensor& t, int root) {
  at::Tensor buf = contiguous(t);
  Pending p;
  p.work = b.broadcast(as_bytes(buf), root);
  if (!buf.is_same(t)) p.finalize = [t, buf] { t.copy_(buf); };
  return p;
}

Pending run_all_gather_into_tensor(Backend& b, const at::Tensor& out, const at::Tensor& in, int rank, int n) {
  at::Tensor src = contiguous(in);
  bool copy_back = false;
  at::Tensor dst = output_buffer(out, copy_back);
  Pending p;
  // In place: the input is this rank's chunk of the output already.
  const bool in_place = !copy_back && static_cast<const char*>(src.data_ptr()) ==
                                          static_cast<const char*>(dst.data_ptr()) +
                                              rank * (dst.nbytes() / static_cast<size_t>(n));
  const BackendCapabilities& caps = b.capabilities();
  if (caps.per_owner_partitioned || (caps.in_place_by_owner && in_place)) {
    at::Tensor bytes = as_bytes(dst);
    const int64_t chunk = bytes.numel() / n;
    at::Tensor own = bytes.narrow(0, rank * chunk, chunk);
    at::Tensor src_bytes = as_bytes(src);
    if (src_bytes.data_ptr() != own.data_ptr()) own.copy_(src_bytes);
    std::vector<BackendWorkPtr> works;
    for (int i = 0; i < n; ++i) works.push_back(b.broadcast(bytes.narrow(0, i * chunk, chunk), i));
    p.work = std::make_unique<WorkSet>(std::move(works));
  } else if (b.capabilities().all_gather_into_tensor) {
    p.work = b.all_gather_base(as_bytes(dst), as_bytes(src));
  } else {
    at::Tensor bytes = as_bytes(dst);
    int64_t chunk = bytes.numel() / n;
    std::vector<at::Tensor> views;
    for (int i = 0; i < n; ++i) views.push_back(bytes.narrow(0, i * chunk, chunk));
    p.work = b.all_gather(views, as_bytes(src));
  }
  if (copy_back) p.finalize = [out, dst] { out.copy_(dst); };
  return p;
}

Pending run_all_gather(Backend& b, const std::vector<at::Tensor>& outs, const at::Tensor& in) {
  std::vector<at::Tensor> bufs, views;
  bool any_staged = false;
  for (const at::Tensor& o : outs) {
    bool copy_back = false;
    bufs.push_back(output_buffer(o, copy_back));
    any_staged = any_staged || copy_back;
    views.push_back(as_bytes(bufs.back()));
  }
  Pending p;
  p.work = b.all_gather(views, as_bytes(contiguous(in)));
  if (any_staged) {
    p.finalize = [outs, bufs] {
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i].is_same(bufs[i])) outs[i].copy_(bufs[i]);
      }
    };
  }
  return p;
}

namespace {

// One reduce per owner's chunk of the contiguous 1-D `flat`, in place (Gloo leaves partial sums in non-root
// chunks); the own chunk holds the reduction after wait (AVG divided there when the backend lacks it).
Pending reduce_per_owner(Backend& b, const at::Tensor& flat, ReduceOp op, int rank, int n) {
  const bool divide = op == ReduceOp::kAvg && !b.supports_reduce_op(op);
  const ReduceOp wire = divide ? ReduceOp::kSum : op;
  const int64_t chunk = flat.numel() / n;
  std::vector<BackendWorkPtr> works;
  for (int i = 0; i < n; ++i) works.push_back(b.reduce(flat.narrow(0, i * chunk, chunk), i, wire));
  Pending p;
  p.work = std::make_unique<WorkSet>(std::move(works));
  if (divide) {
    at::Tensor own = flat.narrow(0, rank * chunk, chunk);
    p.finalize = [own, n] { own.div_(n); };
  }
  return p;
}

}  // namespace

Pending run_reduce_scatter_tensor(Backend& b, const at::Tensor& out, const at::Tensor& in,
                                  ReduceOp op, int rank, int n) {
  DS_CHECK_T(CommError, op != ReduceOp::kAvg || at::isFloatingType(in.scalar_type()),
             "reduce_scatter_tensor: AVG needs a floating dtype, got ",
             c10::toString(in.scalar_type()));
  if (b.capabilities().per_owner_partitioned && b.supports_reduce_dtype(in.scalar_type())) {
    // Per owner on a copy of the input (the caller's input stays as it was), the own chunk copied out at wait.
    at::Tensor scratch = in.contiguous().view({-1}).clone();
    Pending p = reduce_per_owner(b, scratch, op, rank, n);
    const int64_t chunk = scratch.numel() / n;
    p.finalize = [out, scratch, rank, chunk, divide = std::move(p.finalize)] {
      if (divide) divide();
      out.copy_(scratch.narrow(0, rank * chunk, chunk).view(out.sizes()));
    };
    return p;
  }
  if (b.capabilities().reduce_scatter_tensor && b.supports_reduce_dtype(in.scalar_type()) &&
      b.supports_reduce_op(op) && out.is_contiguous()) {
    Pending p;
    p.work = b.reduce_scatter_base(out, contiguous(in), op);
    return p;
  }
  // All-to-all moves chunk j of every input to rank j; each rank then reduces its n chunks locally.
  at::Tensor src = contiguous(in);
  at::Tensor recv = at::empty({in.numel()}, in.options());
  Pending p;
  p.work = b.all_to_all_single(as_bytes(recv), as_bytes(src), {}, {});
  p.finalize = [out, recv, op, n] {
    at::Tensor rows = recv.view({n, recv.numel() / n});
    out.copy_(reduce_rows(rows, op, out.scalar_type()).view(out.sizes()));
  };
  return p;
}

Pending run_reduce_scatter_in_place(Backend& b, const at::Tensor& buf, ReduceOp op, int rank, int n) {
  const BackendCapabilities& caps = b.capabilities();
  // The chunks are scratch: the reduces run on the buffer itself, with no copy.
  if ((caps.per_owner_partitioned || caps.in_place_by_owner) && b.supports_reduce_dtype(buf.scalar_type()))
    return reduce_per_owner(b, buf.view({-1}), op, rank, n);
  const int64_t chunk = buf.numel() / n;
  at::Tensor own = buf.view({-1}).narrow(0, rank * chunk, chunk);
  // The flat call (NCCL reduces in place when the output is the input's own chunk) or its fallback; either may
  // read the whole input while it writes the own chunk.
  return run_reduce_scatter_tensor(b, own, buf, op, rank, n);
}

Pending run_all_to_all_single(Backend& b, const at::Tensor& out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) {
  bool copy_back = false;
  at::Tensor dst = output_buffer(out, copy_back);
  Pending p;
  p.work =
      b.all_to_all_single(as_byte_rows(dst), as_byte_rows(contiguous(in)), out_splits, in_splits);
  if (copy_back) p.finalize = [out, dst] { out.copy_(dst); };
  return p;
}

Pending run_send(Backend& b, const at::Tensor& t, int dst, int tag) {
  at::Tensor buf = contiguous(t);
  Pending p;
  p.work = b.send(as_bytes(buf), dst, tag);
  p.finalize = [buf] {};  // keeps the staging copy alive until the send completes
  return p;
}

Pending run_recv(Backend& b, const at::Tensor& t, int src, int tag) {
  bool copy_back = false;
  at::Tensor buf = output_buffer(t, copy_back);
  Pending p;
  p.work = b.recv(as_bytes(buf), src, tag);
  if (copy_back) p.finalize = [t, buf] { t.copy_(buf); };
  return p;
}

Pending run_barrier(Backend& b) {
  Pending p;
  p.work = b.barrier();
  return p;
}

}  // namespace deepspeed::comm::detail

// ProcessGroup: argument validation, sequence numbers, check mode and logging around each
// collective; the collective itself is chosen and run by fallbacks.cc.
#include <ATen/ATen.h>

#include "comm/collective_check.h"
#include "comm/comms_logger.h"
#include "comm/device_staging.h"
#include "comm/fallbacks.h"
#include "comm/process_group_impl.h"
#include "comm/work_impl.h"

namespace deepspeed::comm {
namespace {

using ::deepspeed::detail::str_cat;
using detail::Fingerprint;
using detail::Pending;
using detail::tensor_desc;

struct Call {
  const char* op;
  Fingerprint fp;
  int64_t msg_bytes = 0;
  bool p2p = false;
};

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

std::string op_suffix(ReduceOp op) {
  return op == ReduceOp::kSum ? "" : ", op=" + reduce_op_name(op);
}

// The usual fingerprint: everything in the description must match across ranks.
Fingerprint same(const std::string& desc) { return Fingerprint{desc, desc}; }

void check_tensor(const at::Tensor& t, const char* op, const char* what) {
  DS_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

int group_rank_of(const ProcessGroup::Impl& g, int global, const char* op, const char* what) {
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    if (g.ranks[i] == global) return static_cast<int>(i);
  }
  throw Error(str_cat(op, ": ", what, "=", global, " is not a member of group ", g.name));
}

Work issue(ProcessGroup::Impl& g, Call c, const std::function<Pending()>& run, bool async_op) {
  detail::CallInfo info;
  uint64_t n = c.p2p ? ++g.p2p_seq : ++g.seq;
  info.op = c.op;
  info.description = c.fp.description;
  info.label = str_cat(c.p2p ? "p2p #" : "collective #", n);
  info.group_name = g.name;
  info.global_rank = g.global_rank;
  info.group_size = static_cast<int>(g.ranks.size());
  info.timeout = g.timeout;
  info.msg_bytes = c.msg_bytes;
  if (g.check && !c.p2p) {
    detail::GroupView view{g.name, g.ranks, g.group_rank, g.timeout};
    detail::check_collective(*g.check_store, view, n, c.fp);
  }
  info.log = detail::CommsLogger::instance().should_log(c.op);
  info.start = std::chrono::steady_clock::now();
  Pending p;
  try {
    p = run();
  } catch (const std::exception&) {
    std::rethrow_exception(detail::with_context(info, std::current_exception()));
  }
  Work w(std::make_shared<Work::Impl>(std::move(p), std::move(info)));
  if (!async_op) w.wait();
  return w;
}

}  // namespace

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

ProcessGroup::Impl& ProcessGroup::member(const char* op) const {
  DS_CHECK_T(CommError, impl_ != nullptr, op, " called on a null ProcessGroup handle");
  DS_CHECK_T(CommError, !impl_->destroyed, op, " called on group ", impl_->name,
             " after destroy_process_group()");
  DS_CHECK_T(CommError, impl_->backend != nullptr, "rank ", impl_->global_rank, " called ", op,
             " on group ", impl_->name, ", which it is not a member of");
  return *impl_;
}

bool ProcessGroup::is_member() const { return impl_ && impl_->group_rank >= 0; }
int ProcessGroup::rank() const { return impl_ ? impl_->group_rank : -1; }
int ProcessGroup::size() const { return impl_ ? static_cast<int>(impl_->ranks.size()) : 0; }
const std::vector<int>& ProcessGroup::ranks() const {
  static const std::vector<int> kNone;
  return impl_ ? impl_->ranks : kNone;
}
const std::string& ProcessGroup::name() const {
  static const std::string kNull = "<null>";
  return impl_ ? impl_->name : kNull;
}
uint64_t ProcessGroup::sequence_number() const { return impl_ ? impl_->seq.load() : 0; }

Work ProcessGroup::all_reduce(const at::Tensor& tensor, ReduceOp op, bool async_op) {
  Impl& g = member("all_reduce");
  check_tensor(tensor, "all_reduce", "tensor");
  Call c{"all_reduce", same("all_reduce(" + tensor_desc(tensor) + op_suffix(op) + ")"),
         nbytes(tensor)};
  int n = size();
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_all_reduce(*g.backend, s.in_out(tensor), op, n));
      }, async_op);
}

Work ProcessGroup::broadcast(const at::Tensor& tensor, int src, bool async_op) {
  Impl& g = member("broadcast");
  check_tensor(tensor, "broadcast", "tensor");
  int root = group_rank_of(g, src, "broadcast", "src");
  Call c{"broadcast", same(str_cat("broadcast(", tensor_desc(tensor), ", src=", src, ")")),
         nbytes(tensor)};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_broadcast(*g.backend, s.in_out(tensor), root));
      }, async_op);
}

Work ProcessGroup::reduce(const at::Tensor& tensor, int dst, ReduceOp op, bool async_op) {
  Impl& g = member("reduce");
  check_tensor(tensor, "reduce", "tensor");
  int root = group_rank_of(g, dst, "reduce", "dst");
  Call c{"reduce", same(str_cat("reduce(", tensor_desc(tensor), ", dst=", dst, op_suffix(op), ")")),
         nbytes(tensor)};
  int n = size();
  bool is_root = root == g.group_rank;
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_reduce(*g.backend, s.in_out(tensor), root, is_root, op, n));
      }, async_op);
}

Work ProcessGroup::all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input,
                                          bool async_op) {
  Impl& g = member("all_gather_into_tensor");
  check_tensor(output, "all_gather_into_tensor", "output");
  check_tensor(input, "all_gather_into_tensor", "input");
  int n = size();
  DS_CHECK(output.numel() == n * input.numel(), "all_gather_into_tensor: output has ",
           output.numel(), " elements, expected group size ", n, " x input ", input.numel());
  DS_CHECK(output.scalar_type() == input.scalar_type(), "all_gather_into_tensor: output dtype ",
           detail::dtype_name(output.scalar_type()), " differs from input dtype ",
           detail::dtype_name(input.scalar_type()));
  Call c{"all_gather_into_tensor", same("all_gather_into_tensor(" + tensor_desc(input) + ")"),
         nbytes(output)};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_all_gather_into_tensor(*g.backend, s.out(output), s.in(input), g.group_rank, n));
      },
      async_op);
}

Work ProcessGroup::all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                              bool async_op) {
  Impl& g = member("all_gather");
  check_tensor(input, "all_gather", "input");
  int n = size();
  DS_CHECK(static_cast<int>(outputs.size()) == n, "all_gather: got ", outputs.size(),
           " output tensors, expected one per rank (", n, ")");
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_tensor(outputs[i], "all_gather", "an output");
    DS_CHECK(outputs[i].numel() == input.numel() && outputs[i].scalar_type() == input.scalar_type(),
             "all_gather: outputs[", i, "] is ", tensor_desc(outputs[i]), ", expected ",
             tensor_desc(input), " like the input");
  }
  Call c{"all_gather", same("all_gather(" + tensor_desc(input) + ")"), n * nbytes(input)};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_all_gather(*g.backend, s.out(outputs), s.in(input)));
      }, async_op);
}

Work ProcessGroup::reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input,
                                         ReduceOp op, bool async_op) {
  Impl& g = member("reduce_scatter_tensor");
  check_tensor(output, "reduce_scatter_tensor", "output");
  check_tensor(input, "reduce_scatter_tensor", "input");
  int n = size();
  DS_CHECK(input.numel() == n * output.numel(), "reduce_scatter_tensor: input has ", input.numel(),
           " elements, expected group size ", n, " x output ", output.numel());
  DS_CHECK(output.scalar_type() == input.scalar_type(), "reduce_scatter_tensor: output dtype ",
           detail::dtype_name(output.scalar_type()), " differs from input dtype ",
           detail::dtype_name(input.scalar_type()));
  Call c{"reduce_scatter_tensor",
         same("reduce_scatter_tensor(" + tensor_desc(input) + op_suffix(op) + ")"), nbytes(input)};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(
            detail::run_reduce_scatter_tensor(*g.backend, s.out(output), s.in(input), op, g.group_rank, n));
      },
      async_op);
}

Work ProcessGroup::reduce_scatter_in_place(const at::Tensor& buffer, ReduceOp op, bool async_op) {
  Impl& g = member("reduce_scatter_in_place");
  check_tensor(buffer, "reduce_scatter_in_place", "buffer");
  int n = size();
  DS_CHECK(buffer.is_contiguous(), "reduce_scatter_in_place: the buffer must be contiguous");
  DS_CHECK(buffer.numel() % n == 0, "reduce_scatter_in_place: buffer has ", buffer.numel(),
           " elements, not divisible by group size ", n);
  DS_CHECK(op != ReduceOp::kAvg || at::isFloatingType(buffer.scalar_type()),
           "reduce_scatter_in_place: AVG needs a floating dtype, got ", detail::dtype_name(buffer.scalar_type()));
  // Logged under reduce_scatter_tensor: the same collective, the same bytes.
  Call c{"reduce_scatter_tensor",
         same("reduce_scatter_in_place(" + tensor_desc(buffer) + op_suffix(op) + ")"), nbytes(buffer)};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_reduce_scatter_in_place(*g.backend, s.in_out(buffer), op, g.group_rank, n));
      }, async_op);
}

namespace {
void check_splits(const std::vector<int64_t>& splits, const at::Tensor& t, int n,
                  const char* what) {
  if (splits.empty()) {
    DS_CHECK(t.size(0) % n == 0, "all_to_all_single: ", what, " has ", t.size(0),
             " rows, not divisible by group size ", n, "; pass split sizes");
    return;
  }
  DS_CHECK(static_cast<int>(splits.size()) == n, "all_to_all_single: ", what, "_split_sizes has ",
           splits.size(), " entries, expected group size ", n);
  int64_t total = 0;
  for (int64_t s : splits) {
    DS_CHECK(s >= 0, "all_to_all_single: negative split size ", s, " in ", what, "_split_sizes");
    total += s;
  }
  DS_CHECK(total == t.size(0), "all_to_all_single: ", what, "_split_sizes sum to ", total, " but ",
           what, " has ", t.size(0), " rows");
}
}  // namespace

Work ProcessGroup::all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                     const std::vector<int64_t>& output_split_sizes,
                                     const std::vector<int64_t>& input_split_sizes, bool async_op) {
  Impl& g = member("all_to_all_single");
  check_tensor(output, "all_to_all_single", "output");
  check_tensor(input, "all_to_all_single", "input");
  DS_CHECK(input.dim() >= 1 && output.dim() >= 1,
           "all_to_all_single: input and output need at least one dimension");
  DS_CHECK(output.scalar_type() == input.scalar_type(), "all_to_all_single: output dtype ",
           detail::dtype_name(output.scalar_type()), " differs from input dtype ",
           detail::dtype_name(input.scalar_type()));
  DS_CHECK(output.numel() * input.size(0) == input.numel() * output.size(0),
           "all_to_all_single: rows of output ", tensor_desc(output), " and input ",
           tensor_desc(input), " differ in size");
  int n = size();
  check_splits(input_split_sizes, input, n, "input");
  check_splits(output_split_sizes, output, n, "output");
  // Split sizes and row counts differ legitimately between ranks: compare op and dtype only.
  std::string dt = detail::dtype_name(input.scalar_type());
  Call c{
      "all_to_all_single",
      Fingerprint{"all_to_all_single(" + dt + ")", "all_to_all_single(" + tensor_desc(input) + ")"},
      nbytes(input)};
  return issue(
      g, c,
      [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_all_to_all_single(*g.backend, s.out(output), s.in(input), output_split_sizes,
                                                      input_split_sizes));
      },
      async_op);
}

Work ProcessGroup::send(const at::Tensor& tensor, int dst, int tag, bool async_op) {
  Impl& g = member("send");
  check_tensor(tensor, "send", "tensor");
  int peer = group_rank_of(g, dst, "send", "dst");
  DS_CHECK(peer != g.group_rank, "send: rank ", dst, " cannot send to itself");
  Call c{"send", same(str_cat("send(", tensor_desc(tensor), ", dst=", dst, ")")), nbytes(tensor),
         true};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_send(*g.backend, s.in(tensor), peer, tag));
      }, async_op);
}

Work ProcessGroup::recv(const at::Tensor& tensor, int src, int tag, bool async_op) {
  Impl& g = member("recv");
  check_tensor(tensor, "recv", "tensor");
  int peer = group_rank_of(g, src, "recv", "src");
  DS_CHECK(peer != g.group_rank, "recv: rank ", src, " cannot receive from itself");
  Call c{"recv", same(str_cat("recv(", tensor_desc(tensor), ", src=", src, ")")), nbytes(tensor),
         true};
  return issue(
      g, c, [&] {
        detail::DeviceStaging s(*g.backend);
        return s.finish(detail::run_recv(*g.backend, s.out(tensor), peer, tag));
      }, async_op);
}

Work ProcessGroup::barrier(bool async_op) {
  Impl& g = member("barrier");
  Call c{"barrier", same("barrier()"), 0};
  return issue(
      g, c, [&] { return detail::run_barrier(*g.backend); }, async_op);
}

}  // namespace deepspeed::comm

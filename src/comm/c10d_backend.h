// The adapter between deepspeed::comm and c10d: the only place that knows c10d's classes, options
// and Work API. What the backend supports natively is probed here, once per process, not decided by
// LibTorch version checks elsewhere.
//
// This header names no c10d type, so the rest of src/comm compiles against ATen alone. Backend
// methods take group-local ranks and tensors the backend can handle as they are (contiguous; dtypes
// it supports): making tensors fit is fallbacks.cc's job, deciding which path to take is the
// capability queries' job.
//
// Thread-safety: a Backend may be used from one issuing thread; its BackendWork objects may be
// waited on from any thread. KeyValueStore is thread-safe (c10d stores serialise their requests).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/error.h"

namespace deepspeed::comm::detail {

// Thrown by BackendWork::wait when a peer closed its connection (died) rather than being slow.
class PeerLostError : public CommTimeoutError {
 public:
  using CommTimeoutError::CommTimeoutError;
};

// One issued backend operation.
class BackendWork {
 public:
  virtual ~BackendWork() = default;
  // Blocks until done. Throws CommTimeoutError on a timeout, PeerLostError when a peer went away,
  // CommError otherwise; messages are the backend's own.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};
using BackendWorkPtr = std::unique_ptr<BackendWork>;

// The rendezvous key-value store (c10d TCPStore on the master, or an in-process store for a world
// of one).
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists (up to the store's timeout).
  virtual std::string get(const std::string& key) = 0;
  // True when all keys exist; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void remove(const std::string& key) = 0;
  // A view of this store whose keys are prefixed with `prefix` (for one group's use).
  virtual std::shared_ptr<KeyValueStore> with_prefix(const std::string& prefix) = 0;
};

// Rank 0 (`is_server`) hosts the store; every rank connects to host:port. Throws CommTimeoutError
// when the rendezvous does not complete within `timeout`.
std::shared_ptr<KeyValueStore> create_tcp_store(const std::string& host, int port, bool is_server,
                                                int world_size, std::chrono::milliseconds timeout);
std::shared_ptr<KeyValueStore> create_local_store();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // What the backend does natively (probed once per process); the facade falls back for the rest.
  virtual const BackendCapabilities& capabilities() const = 0;
  bool supports_reduce_op(ReduceOp op) const { return op != ReduceOp::kAvg || capabilities().avg; }
  bool supports_reduce_dtype(at::ScalarType dtype) const;

  virtual BackendWorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) = 0;
  virtual BackendWorkPtr reduce(const at::Tensor& tensor, int root, ReduceOp op) = 0;
  virtual BackendWorkPtr broadcast(const at::Tensor& tensor, int root) = 0;
  // outputs[i] receives rank i's input.
  virtual BackendWorkPtr all_gather(const std::vector<at::Tensor>& outputs,
                                    const at::Tensor& input) = 0;
  virtual BackendWorkPtr all_gather_base(const at::Tensor& output, const at::Tensor& input) = 0;
  virtual BackendWorkPtr reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                             ReduceOp op) = 0;
  // Splits along dim 0 in rows; empty split vectors mean equal splits.
  virtual BackendWorkPtr all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                           const std::vector<int64_t>& output_splits,
                                           const std::vector<int64_t>& input_splits) = 0;
  virtual BackendWorkPtr send(const at::Tensor& tensor, int dst, int tag) = 0;
  virtual BackendWorkPtr recv(const at::Tensor& tensor, int src, int tag) = 0;
  virtual BackendWorkPtr barrier() = 0;
};

struct BackendOptions {
  std::string name;  // "gloo"; "nccl" comes with the CUDA adapter
  int rank = 0;      // in the group
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::string master_addr;  // picks the network interface (loopback when the master is local)
  // nccl: the rank's device (bind_local_device made it current before any group); every group is bound to it, so
  // a group whose first operation is a barrier runs there, not on group_rank % device_count. -1: not known.
  int device_index = -1;
};

// What `backend` ("gloo") does natively, probed on first use (CommError for an unknown backend).
const BackendCapabilities& capabilities_of(const std::string& backend);

// Connects the group's members; blocks until all of them have called it. Throws CommError for an
// unknown backend.
std::unique_ptr<Backend> create_backend(const BackendOptions& options,
                                        const std::shared_ptr<KeyValueStore>& store);

}  // namespace deepspeed::comm::detail

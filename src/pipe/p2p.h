// Point-to-point transfers between neighbouring pipeline stages.
//
// The first time a link carries a tensor, the sender announces its dtype and shape in a small fixed-size message
// so the receiver can allocate its buffers; afterwards only the data travels and the receiver reuses the buffers.
// Later tensors must match the announced dtype and shape: the sender checks (the receiver cannot) and throws a
// clear error rather than send a message the receiver would misread.
//
// Thread-safety: one link is used from one thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "deepspeed/comm.h"

namespace deepspeed::pipe {

class P2PLink {
 public:
  // `what` names the traffic in errors ("activations to stage 2").
  P2PLink(comm::ProcessGroup world, int peer, std::string what);

  // Sends `t` (made contiguous) to the peer; announces its dtype and shape on the first call.
  void send(const at::Tensor& t);
  // Receives into `buffer` (allocated from the announcement on the first call, if undefined) and returns it.
  at::Tensor recv(at::Tensor& buffer);
  // The announced tensor's options and shape, once known.
  bool negotiated() const { return negotiated_; }
  at::Tensor empty_like_announced() const;

 private:
  comm::ProcessGroup world_;
  int peer_;
  std::string what_;
  bool negotiated_ = false;
  at::ScalarType dtype_ = at::kFloat;
  std::vector<int64_t> shape_;
};

}  // namespace deepspeed::pipe

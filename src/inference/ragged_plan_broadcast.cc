// See ragged_plan_broadcast.h.
#include "inference/ragged_plan_broadcast.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::inference {
namespace {

constexpr int64_t kEnd = 0, kPass = 1;

// [T, tokens..., n, then per sequence: start, length, wants_logits, blocks, block ids...].
std::vector<int64_t> encode_pass(const RaggedPass& pass) {
  std::vector<int64_t> out;
  out.push_back(static_cast<int64_t>(pass.tokens.size()));
  out.insert(out.end(), pass.tokens.begin(), pass.tokens.end());
  out.push_back(static_cast<int64_t>(pass.sequences.size()));
  for (const models::PagedSequence& s : pass.sequences) {
    out.insert(out.end(), {s.start, s.length, s.wants_logits ? 1 : 0, static_cast<int64_t>(s.blocks.size())});
    out.insert(out.end(), s.blocks.begin(), s.blocks.end());
  }
  return out;
}

RaggedPass decode_pass(const std::vector<int64_t>& in) {
  RaggedPass pass;
  size_t at = 0;
  auto next = [&] {
    DS_ASSERT(at < in.size(), "a ragged pass's message is cut short");
    return in[at++];
  };
  const int64_t t = next();
  for (int64_t i = 0; i < t; ++i) pass.tokens.push_back(next());
  const int64_t n = next();
  for (int64_t i = 0; i < n; ++i) {
    models::PagedSequence s;
    s.start = next();
    s.length = next();
    s.wants_logits = next() != 0;
    const int64_t blocks = next();
    for (int64_t b = 0; b < blocks; ++b) s.blocks.push_back(next());
    pass.sequences.push_back(std::move(s));
  }
  return pass;
}

}  // namespace

void send_pass(comm::ProcessGroup& group, const RaggedPass* pass, const c10::Device& device) {
  const int src = group.ranks().front();
  const std::vector<int64_t> payload = pass != nullptr ? encode_pass(*pass) : std::vector<int64_t>();
  const at::Tensor header =
      at::tensor(std::vector<int64_t>{pass != nullptr ? kPass : kEnd, static_cast<int64_t>(payload.size())}, at::kLong)
          .to(device);
  group.broadcast(header, src);
  if (!payload.empty()) group.broadcast(at::tensor(payload, at::kLong).to(device), src);
}

bool receive_pass(comm::ProcessGroup& group, RaggedPass& pass, const c10::Device& device) {
  const int src = group.ranks().front();
  const at::Tensor header = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(device));
  group.broadcast(header, src);
  const at::Tensor h = header.cpu();
  if (h[0].item<int64_t>() == kEnd) return false;
  const at::Tensor payload = at::zeros({h[1].item<int64_t>()}, at::TensorOptions().dtype(at::kLong).device(device));
  group.broadcast(payload, src);
  const at::Tensor cpu = payload.cpu().contiguous();
  pass = decode_pass(std::vector<int64_t>(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel()));
  return true;
}

}  // namespace deepspeed::inference

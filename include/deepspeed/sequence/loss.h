// The loss of sequences split over a sequence-parallel group (Ulysses): the mean over every position of the whole
// sequences that counts (targets not -100), whichever rank holds it, as DeepSpeed's ALST computes it (each rank's
// summed loss gathered differentiably and weighted by its count). Each rank's own mean, averaged over the ranks, is
// that only when every rank holds as many counted positions: an SFT sample whose response lies in one rank's part
// would weigh that part by the number of ranks (and give 0/0 on the others).
//
//   at::Tensor sum = cross_entropy(logits, targets, sum);        // this rank's positions
//   at::Tensor loss = sequence_parallel_mean(sum, (targets != -100).sum(), group);   // the same on every rank
//
// The engine averages gradients over the sequence-parallel ranks (to it they are data-parallel replicas), so the
// backward gives each rank's sum the gradient (ranks / total count) that this average turns into the mean's.
#pragma once

#include <ATen/core/Tensor.h>

#include "deepspeed/comm.h"

namespace deepspeed::sequence {

// `loss_sum`: this rank's summed loss (a differentiable scalar); `count`: its counted positions (an integer or float
// scalar tensor). Returns sum over the group of the sums / sum of the counts, on every rank of `group` (a collective:
// every rank calls it). Without a group (null handle, or one rank): loss_sum / count.
at::Tensor sequence_parallel_mean(const at::Tensor& loss_sum, const at::Tensor& count, const comm::ProcessGroup& group);

}  // namespace deepspeed::sequence

// ProcessGroup::Impl: one group's members, backend, sequence numbers and check-mode store.
//
// Thread-safety: collectives of one group are issued from one thread at a time (they must be issued
// in the same order on every rank anyway); the sequence counters are atomic only so that
// sequence_number() may be read from elsewhere.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/c10d_backend.h"
#include "deepspeed/comm.h"

namespace deepspeed::comm {

class ProcessGroup::Impl {
 public:
  std::string name;
  std::vector<int> ranks;  // global ranks by group rank
  int group_rank = -1;     // -1: this process is not a member
  int global_rank = 0;
  std::chrono::milliseconds timeout{0};
  bool check = false;
  std::unique_ptr<detail::Backend> backend;  // null for non-members and after destroy
  std::shared_ptr<detail::KeyValueStore>
      check_store;  // this group's prefix of the rendezvous store
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> p2p_seq{0};
  bool destroyed = false;
};

}  // namespace deepspeed::comm

// A world split into a grid of `inner` consecutive ranks by world/inner strided ranks, the layout tensor, sequence
// and expert parallelism use (Megatron's and DeepSpeed's): ranks [k*inner, (k+1)*inner) form one inner group (a
// node's fast links carry its frequent collectives), and ranks r, r+inner, r+2*inner, ... one outer group (the
// data-parallel peers that hold the same slice). Implemented in grid_groups.cc.
#pragma once

#include <string>

#include "deepspeed/comm.h"

namespace deepspeed::comm {

struct GridGroups {
  int inner_size = 1;
  ProcessGroup inner;  // this rank's inner group
  ProcessGroup outer;  // the ranks at this rank's position in the other inner groups
};

// The grid for `inner_size` (which must divide the world; `what` names the setting in the error), made once per world
// under `name` and shared by every caller asking for the same name and size. At inner_size 1 there is no inner group
// (a null handle: is_member() is false) and the outer one is the world. Collective the first time: every rank must
// ask, in the same order.
GridGroups grid_groups(const std::string& name, const std::string& what, int inner_size);

}  // namespace deepspeed::comm

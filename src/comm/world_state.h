// State that belongs to the current world and ends with it: objects other subsystems build over the world's groups
// (the MoE layer's expert-parallel groups) live here instead of in process-wide statics, so destroy_process_group()
// takes them along and a new world starts without them. Implemented in comm.cc, beside the world itself.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace deepspeed::comm {

// The object stored under `key` in the current world, made by `make` the first time this world is asked. Starts the
// world from the environment if none is running (as the groups do). Thread-safe; `make` runs under the world's lock,
// so it must not call back into the comm layer's world-level functions.
std::shared_ptr<void> world_state(const std::string& key, const std::function<std::shared_ptr<void>()>& make);

}  // namespace deepspeed::comm

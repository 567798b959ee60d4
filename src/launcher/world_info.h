// DeepSpeed's --world_info: the resource pool a multi-node runner hands to every node-local
// launcher, as URL-safe base64 of the JSON object {"host": [slot, ...], ...} in pool order (the
// order decides global ranks). Base64 keeps the value one plain word on any remote command line.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "launcher/launcher.h"

namespace deepspeed::launcher {

std::string encode_world_info(const ResourcePool& pool);

// Throws LaunchError naming --world_info when the text is not base64 of such an object, a host has
// no slots, a slot is negative or repeated.
ResourcePool decode_world_info(const std::string& encoded);

}  // namespace deepspeed::launcher

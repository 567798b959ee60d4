// Reads the pickle of a torch.save file that Python wrote (DeepSpeed's own checkpoints), which torch's C++
// unpickler refuses: such files hold Python objects beside the tensors (OrderedDict, torch.Size, DeepSpeed's loss
// scaler, its ZeroStageEnum, tensor-fragment addresses).
//
// What each Python value becomes:
//   dict, collections.OrderedDict      GenericDict of Any to Any, insertion order kept (an OrderedDict's own
//                                      attributes, such as a module state_dict's `_metadata`, are dropped)
//   list / tuple                       GenericList of Any / Tuple
//   str, int, float, bool, None        the same (ints beyond 64 bits are an error)
//   torch.Size                         a tuple of ints
//   tensors (torch._utils._rebuild_tensor_v2, _rebuild_parameter, torch._tensor._rebuild_from_type_v2)
//                                      at::Tensor over the storage the loader returns for its record key; storages
//                                      shared between tensors stay shared. Python attributes set on a tensor
//                                      subclass (the state of _rebuild_from_type_v2) are dropped.
//   an enum member of a known enum     its integer value (deepspeed...ZeroStageEnum.gradients -> 2)
//   a torch dtype as a value           its name, a string ("torch.float16")
//   an object of a known plain-data class (DeepSpeed's LossScaler, DynamicLossScaler, fragment_address)
//                                      a dict of its attributes plus "__class__": "module.Name"
// Any other class is refused with an error naming it; unknown opcodes likewise. Protocols 2 to 5.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

// The storage behind record data/<key> of the archive: `numel` elements of `dtype`.
using PickleStorageLoader = std::function<c10::Storage(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// Unpickles `size` bytes at `data`. `file` names the source in errors (CheckpointError, one line).
c10::IValue read_python_pickle(const char* data, size_t size, const PickleStorageLoader& load_storage,
                               const std::string& file);

// d[key] when `d` is a dict holding `key` (the dicts read_python_pickle makes are keyed by Any).
std::optional<c10::IValue> dict_get(const c10::IValue& d, const c10::IValue& key);

// True when `path` opens as a torch.save zip archive with a pickle (whatever the pickle holds).
bool is_torch_archive(const std::string& path);

// A whole torch.save file written by Python: its data.pkl through read_python_pickle, with tensors pointing into
// the file's bytes (read, or mapped with options.mmap: then only what is touched is read), as load_state does, and
// the records' CRC-32s checked (all, or per tensor with verify_tensor when options.verify_checksums is false).
// Implemented in state_io.cc, beside load_state.
c10::IValue load_python_torch_file(const std::string& path, const LoadOptions& options = {});

}  // namespace deepspeed::checkpoint

// Writes the pickle of a torch.save file as Python writes it, for files Python DeepSpeed must read: its loaders
// want Python objects our IValues cannot carry (its loss scaler object, torch.Size, OrderedDict, ZeroStageEnum),
// and torch's C++ pickler names nothing outside torch. The counterpart of python_pickle.h, protocol 2.
//
// What each value becomes:
//   None, bool, int, double, string     the same
//   Tuple / GenericList / GenericDict   tuple / list / dict (keys of any type: a torch optimizer's state is
//                                       keyed by int)
//   at::Tensor                          torch._utils._rebuild_tensor_v2 over a storage record of its own
//                                       (persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel))
//   the marker dicts made below         the Python object they describe
// Anything else (objects, futures, ...) is an error naming its kind.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <vector>

namespace deepspeed::checkpoint {

// An instance of `qualified_class` ("package.module.Name") built as pickle builds a plain object: Name.__new__,
// then `attributes` set as its __dict__. The same shape read_python_pickle gives objects of known classes.
c10::IValue py_object(const std::string& qualified_class, const c10::impl::GenericDict& attributes);

// The result of calling `qualified_callable` with `args` (an enum member: ZeroStageEnum(2); torch.Size([3, 4])).
c10::IValue py_call(const std::string& qualified_callable, std::vector<c10::IValue> args);

// collections.OrderedDict holding `items` in their order.
c10::IValue py_ordered_dict(const c10::impl::GenericDict& items);

// torch.Size(shape).
c10::IValue py_size(const std::vector<int64_t>& shape);

// The pickle bytes of `value`; `storages` receives each tensor's storage, in record order (data/0, data/1, ...):
// tensors exactly covering their storage (checkpoint/archive_writer.h writes them as records).
std::vector<char> write_python_pickle(const c10::IValue& value, std::vector<at::Tensor>* storages);

}  // namespace deepspeed::checkpoint

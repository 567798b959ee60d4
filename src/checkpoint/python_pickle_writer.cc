// Pickle protocol 2 written opcode by opcode (python_pickle_writer.h). No memo: every value is written where it
// occurs, which Python's unpickler accepts; shared tensors become separate storages.
#include "checkpoint/python_pickle_writer.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <optional>

#include "checkpoint/archive_writer.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

// Keys of the marker dicts (py_call, py_ordered_dict); objects use "__class__" as read_python_pickle does.
constexpr const char* kClassKey = "__class__";
constexpr const char* kCallKey = "__pickle_call__";
constexpr const char* kArgsKey = "__pickle_args__";
constexpr const char* kItemsKey = "__pickle_items__";

const char* storage_class(at::ScalarType t) {
  static const std::map<at::ScalarType, const char*> names = {
      {at::kFloat, "FloatStorage"}, {at::kDouble, "DoubleStorage"}, {at::kHalf, "HalfStorage"},
      {at::kBFloat16, "BFloat16Storage"}, {at::kLong, "LongStorage"}, {at::kInt, "IntStorage"},
      {at::kShort, "ShortStorage"}, {at::kChar, "CharStorage"}, {at::kByte, "ByteStorage"},
      {at::kBool, "BoolStorage"},
  };
  auto it = names.find(t);
  DS_CHECK_T(CheckpointError, it != names.end(), "cannot write a ", t, " tensor into a Python pickle");
  return it->second;
}

class PickleWriter {
 public:
  explicit PickleWriter(std::vector<at::Tensor>* storages) : storages_(storages) {
    op('\x80');
    op('\x02');
  }

  std::vector<char> finish() {
    op('.');
    return std::move(out_);
  }

  void value(const c10::IValue& v) {
    if (v.isNone()) return op('N');
    if (v.isBool()) return op(v.toBool() ? '\x88' : '\x89');
    if (v.isInt()) return integer(v.toInt());
    if (v.isDouble()) return floating(v.toDouble());
    if (v.isString()) return string(v.toStringRef());
    if (v.isTensor()) return tensor(v.toTensor());
    if (v.isTuple()) return tuple(v.toTupleRef().elements());
    if (v.isList()) return list(v.toListRef());
    if (v.isGenericDict()) return dict(v.toGenericDict());
    DS_CHECK_T(CheckpointError, false, "cannot write a ", v.tagKind(), " into a Python pickle");
  }

 private:
  void op(char c) { out_.push_back(c); }
  void bytes(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    out_.insert(out_.end(), c, c + n);
  }
  void u32(uint32_t x) {
    const unsigned char b[4] = {static_cast<unsigned char>(x), static_cast<unsigned char>(x >> 8),
                                static_cast<unsigned char>(x >> 16), static_cast<unsigned char>(x >> 24)};
    bytes(b, 4);
  }

  void integer(int64_t x) {
    if (x >= 0 && x < 256) {
      op('K');
      op(static_cast<char>(x));
    } else if (x >= INT32_MIN && x <= INT32_MAX) {
      op('J');
      u32(static_cast<uint32_t>(static_cast<int32_t>(x)));
    } else {  // LONG1: 8 bytes, little-endian two's complement
      op('\x8a');
      op('\x08');
      const auto u = static_cast<uint64_t>(x);
      for (int i = 0; i < 8; ++i) op(static_cast<char>(u >> (8 * i)));
    }
  }

  void floating(double d) {  // BINFLOAT: big-endian IEEE double
    op('G');
    uint64_t u;
    std::memcpy(&u, &d, 8);
    for (int i = 7; i >= 0; --i) op(static_cast<char>(u >> (8 * i)));
  }

  void string(const std::string& s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }

  void global(const std::string& qualified) {
    const size_t dot = qualified.rfind('.');
    DS_CHECK_T(CheckpointError, dot != std::string::npos, "'", qualified, "' is not a module.Name");
    op('c');
    bytes(qualified.data(), dot);
    op('\n');
    bytes(qualified.data() + dot + 1, qualified.size() - dot - 1);
    op('\n');
  }

  template <typename Items>
  void tuple(const Items& items) {
    if (items.empty()) return op(')');
    op('(');
    for (const c10::IValue& v : items) value(v);
    op('t');
  }

  void list(c10::ArrayRef<c10::IValue> items) {
    op(']');
    if (items.empty()) return;
    op('(');
    for (const c10::IValue& v : items) value(v);
    op('e');  // APPENDS
  }

  void setitems(const c10::impl::GenericDict& d, bool skip_markers) {
    bool any = false;
    for (const auto& e : d) {
      if (skip_markers && e.key().isString() && is_marker_key(e.key().toStringRef())) continue;
      if (!any) op('(');
      any = true;
      value(e.key());
      value(e.value());
    }
    if (any) op('u');  // SETITEMS
  }

  static bool is_marker_key(const std::string& k) {
    return k == kClassKey || k == kCallKey || k == kArgsKey || k == kItemsKey;
  }

  void dict(const c10::impl::GenericDict& d) {
    auto find = [&](const char* key) -> std::optional<c10::IValue> {
      auto it = d.find(std::string(key));
      if (it == d.end()) return std::nullopt;
      return it->value();
    };
    if (auto call = find(kCallKey)) {
      global(call->toStringRef());
      auto args = find(kArgsKey);
      tuple(args ? args->toTupleRef().elements() : c10::ArrayRef<c10::IValue>());
      op('R');  // REDUCE
      if (auto items = find(kItemsKey)) setitems(items->toGenericDict(), false);
      return;
    }
    if (auto cls = find(kClassKey); cls && cls->isString()) {
      global(cls->toStringRef());
      op(')');
      op('\x81');  // NEWOBJ: cls.__new__(cls)
      op('}');
      setitems(d, true);
      op('b');  // BUILD: the attributes become its __dict__
      return;
    }
    op('}');
    setitems(d, false);
  }

  void tensor(const at::Tensor& in) {
    const at::Tensor t = exact_storage(in);
    const std::string key = std::to_string(storages_->size());
    storages_->push_back(t);
    global("torch._utils._rebuild_tensor_v2");
    op('(');
    {  // the storage, by persistent id
      op('(');
      string("storage");
      global(std::string("torch.") + storage_class(t.scalar_type()));
      string(key);
      string("cpu");
      integer(t.numel());
      op('t');
      op('Q');  // BINPERSID
    }
    integer(0);  // storage offset
    std::vector<c10::IValue> sizes, strides;
    for (int64_t s : t.sizes()) sizes.emplace_back(s);
    for (int64_t s : t.strides()) strides.emplace_back(s);
    tuple(sizes);
    tuple(strides);
    op('\x89');  // requires_grad False
    global("collections.OrderedDict");
    op(')');
    op('R');  // backward hooks: OrderedDict()
    op('t');
    op('R');
  }

  std::vector<char> out_;
  std::vector<at::Tensor>* storages_;
};

}  // namespace

c10::IValue py_object(const std::string& qualified_class, const c10::impl::GenericDict& attributes) {
  c10::impl::GenericDict d = make_any_dict();
  d.insert(std::string(kClassKey), qualified_class);
  for (const auto& e : attributes) d.insert(e.key(), e.value());
  return d;
}

c10::IValue py_call(const std::string& qualified_callable, std::vector<c10::IValue> args) {
  c10::impl::GenericDict d = make_any_dict();
  d.insert(std::string(kCallKey), qualified_callable);
  d.insert(std::string(kArgsKey), c10::ivalue::Tuple::create(std::move(args)));
  return d;
}

c10::IValue py_ordered_dict(const c10::impl::GenericDict& items) {
  c10::impl::GenericDict d = py_call("collections.OrderedDict", {}).toGenericDict();
  d.insert(std::string(kItemsKey), items);
  return d;
}

c10::IValue py_size(const std::vector<int64_t>& shape) {
  std::vector<c10::IValue> dims(shape.begin(), shape.end());
  return py_call("torch.Size", {c10::ivalue::Tuple::create(std::move(dims))});
}

std::vector<char> write_python_pickle(const c10::IValue& value, std::vector<at::Tensor>* storages) {
  PickleWriter w(storages);
  w.value(value);
  return w.finish();
}

}  // namespace deepspeed::checkpoint

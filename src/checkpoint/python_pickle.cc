// A pickle machine for the values torch.save files carry (see python_pickle.h): a stack of items (values, classes
// and functions named by GLOBAL, marks), a memo, and the handful of callables those files apply with REDUCE or
// NEWOBJ, each mapped to what our state dicts hold.
#include "checkpoint/python_pickle.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

// A class or function named by GLOBAL / STACK_GLOBAL ("module.Name"), or a value, or a MARK.
struct Item {
  enum class Kind { kValue, kGlobal, kMark };
  Kind kind = Kind::kValue;
  c10::IValue value;
  std::string global;
};

// Classes whose instances are plain data: their attributes become a dict.
const std::set<std::string>& plain_data_classes() {
  static const std::set<std::string> names = {
      "deepspeed.runtime.fp16.loss_scaler.LossScaler",
      "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
      "deepspeed.utils.tensor_fragment.fragment_address",
  };
  return names;
}

// Enums whose members map to their integer values.
const std::map<std::string, std::map<std::string, int64_t>>& known_enums() {
  static const std::map<std::string, std::map<std::string, int64_t>> enums = {
      {"deepspeed.runtime.zero.config.ZeroStageEnum",
       {{"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}, {"max_stage", 3}}},
  };
  return enums;
}

at::ScalarType storage_dtype(const std::string& cls) {
  static const std::map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},     {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},       {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},       {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},     {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},       {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat}, {"torch.ComplexDoubleStorage", at::kComplexDouble},
  };
  auto it = types.find(cls);
  if (it == types.end()) return at::ScalarType::Undefined;
  return it->second;
}

class Machine {
 public:
  Machine(const char* data, size_t size, const PickleStorageLoader& load, const std::string& file)
      : start_(data), p_(data), end_(data + size), load_(load), file_(file) {}

  c10::IValue run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;        // PROTO
        case 0x95: take(8); break;       // FRAME: a length hint
        case '.': return finish();       // STOP
        case '(': push_mark(); break;    // MARK
        case '0': pop(); break;          // POP
        case '1': pop_to_mark(); break;  // POP_MARK
        case '2': stack_.push_back(top()); break;  // DUP
        case 'N': push(c10::IValue()); break;
        case 0x88: push(true); break;   // NEWTRUE
        case 0x89: push(false); break;  // NEWFALSE
        case 'J': push(static_cast<int64_t>(static_cast<int32_t>(le(4)))); break;  // BININT
        case 'K': push(static_cast<int64_t>(le(1))); break;                         // BININT1
        case 'M': push(static_cast<int64_t>(le(2))); break;                         // BININT2
        case 0x8a: push(long1(le(1))); break;                                        // LONG1
        case 'G': push(binfloat()); break;                                           // BINFLOAT
        case 0x8c: push(text(le(1))); break;                                         // SHORT_BINUNICODE
        case 'X': push(text(le(4))); break;                                          // BINUNICODE
        case 0x8d: push(text(le(8))); break;                                         // BINUNICODE8
        case 'U': push(text(le(1))); break;                                          // SHORT_BINSTRING
        case 'T': push(text(le(4))); break;                                          // BINSTRING
        case 'C': push(bytes(le(1))); break;                                         // SHORT_BINBYTES
        case 'B': push(bytes(le(4))); break;                                         // BINBYTES
        case '}': push(new_dict()); break;                                           // EMPTY_DICT
        case ']': push(c10::impl::GenericList(c10::AnyType::get())); break;          // EMPTY_LIST
        case ')': push(c10::ivalue::Tuple::create({})); break;                       // EMPTY_TUPLE
        case 't': push(tuple_of(pop_to_mark())); break;                              // TUPLE
        case 0x85: push(tuple_of(pop_n(1))); break;                                  // TUPLE1
        case 0x86: push(tuple_of(pop_n(2))); break;                                  // TUPLE2
        case 0x87: push(tuple_of(pop_n(3))); break;                                  // TUPLE3
        case 'l': {                                                                   // LIST
          c10::impl::GenericList list(c10::AnyType::get());
          for (Item& i : pop_to_mark()) list.push_back(value_of(i));
          push(list);
          break;
        }
        case 'd': {  // DICT
          c10::impl::GenericDict dict = new_dict();
          std::vector<Item> items = pop_to_mark();
          set_items(dict, items);
          push(dict);
          break;
        }
        case 'a': {  // APPEND
          c10::IValue v = value_of(pop());
          list_at_top().push_back(std::move(v));
          break;
        }
        case 'e': {  // APPENDS
          std::vector<Item> items = pop_to_mark();
          c10::impl::GenericList list = list_at_top();
          for (Item& i : items) list.push_back(value_of(i));
          break;
        }
        case 's': {  // SETITEM
          std::vector<Item> items = pop_n(2);
          c10::impl::GenericDict dict = dict_at_top();
          set_items(dict, items);
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<Item> items = pop_to_mark();
          c10::impl::GenericDict dict = dict_at_top();
          set_items(dict, items);
          break;
        }
        case 'q': memo_[le(1)] = top(); break;   // BINPUT
        case 'r': memo_[le(4)] = top(); break;   // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
        case 'h': push_item(memo(le(1))); break;  // BINGET
        case 'j': push_item(memo(le(4))); break;  // LONG_BINGET
        case 'c': {                               // GLOBAL: "module\nname\n"
          std::string module = line(), name = line();
          push_global(module, name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          std::vector<Item> mn = pop_n(2);
          push_global(string_of(mn[0]), string_of(mn[1]));
          break;
        }
        case 'R': {  // REDUCE
          c10::IValue args = value_of(pop());
          Item callable = pop();
          push(call(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          c10::IValue args = value_of(pop());
          Item cls = pop();
          push(construct(cls, args));
          break;
        }
        case 'b': {  // BUILD
          c10::IValue state = value_of(pop());
          build(top(), state);
          break;
        }
        case 'Q': {  // BINPERSID
          c10::IValue pid = value_of(pop());
          push(persistent(pid));
          break;
        }
        default:
          fail("unsupported pickle opcode 0x" + hex(op) + " at byte " + std::to_string(p_ - 1 - start_));
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError("checkpoint file " + file_ + ": " + what);
  }
  static std::string hex(uint8_t b) {
    static const char* digits = "0123456789abcdef";
    return std::string{digits[b >> 4], digits[b & 15]};
  }

  // --- reading ---
  const char* take(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) fail("pickle truncated (it ends inside an opcode)");
    const char* at = p_;
    p_ += n;
    return at;
  }
  uint8_t byte() { return static_cast<uint8_t>(*take(1)); }
  uint64_t le(int n) {
    const char* b = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[i]);
    return v;
  }
  c10::IValue long1(uint64_t n) {
    if (n > 8) fail("an integer of " + std::to_string(n) + " bytes does not fit 64 bits");
    const char* b = take(n);
    if (n == 0) return int64_t{0};
    uint64_t v = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[i]);
    if (n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  double binfloat() {
    const char* b = take(8);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(b[i]);  // big-endian
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  std::string text(uint64_t n) {
    const char* b = take(n);
    return std::string(b, n);
  }
  c10::IValue bytes(uint64_t n) { return text(n); }
  std::string line() {
    const char* nl = static_cast<const char*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (nl == nullptr) fail("pickle truncated (a GLOBAL without its newline)");
    std::string s(p_, nl);
    p_ = nl + 1;
    return s;
  }

  // --- the stack ---
  void push(c10::IValue v) {
    Item i;
    i.value = std::move(v);
    stack_.push_back(std::move(i));
  }
  void push_item(Item i) { stack_.push_back(std::move(i)); }
  void push_mark() {
    Item i;
    i.kind = Item::Kind::kMark;
    stack_.push_back(std::move(i));
  }
  void push_global(const std::string& module, const std::string& name) {
    Item i;
    i.kind = Item::Kind::kGlobal;
    // Python 2's module names, as protocol-2 pickles spell builtins.
    i.global = (module == "__builtin__" ? std::string("builtins") : module) + "." + name;
    stack_.push_back(std::move(i));
  }
  Item& top() {
    if (stack_.empty()) fail("malformed pickle (stack underflow)");
    return stack_.back();
  }
  Item pop() {
    Item i = std::move(top());
    stack_.pop_back();
    if (i.kind == Item::Kind::kMark) fail("malformed pickle (a MARK where a value was expected)");
    return i;
  }
  std::vector<Item> pop_n(size_t n) {
    if (stack_.size() < n) fail("malformed pickle (stack underflow)");
    std::vector<Item> out(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(n)),
                          std::make_move_iterator(stack_.end()));
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<Item> pop_to_mark() {
    size_t m = stack_.size();
    while (m > 0 && stack_[m - 1].kind != Item::Kind::kMark) --m;
    if (m == 0) fail("malformed pickle (no MARK)");
    std::vector<Item> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                          std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    return out;
  }
  Item memo(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("malformed pickle (memo " + std::to_string(key) + " was never stored)");
    return it->second;
  }
  c10::IValue value_of(const Item& i) const {
    if (i.kind == Item::Kind::kGlobal) {
      // A torch dtype stored as a value (DeepSpeed's loss scaler keeps the one it scales): its name.
      static const std::set<std::string> dtypes = {"torch.float16", "torch.bfloat16", "torch.float32",
                                                   "torch.float64", "torch.int64",   "torch.int32",
                                                   "torch.uint8",   "torch.int8",    "torch.bool"};
      if (dtypes.count(i.global)) return i.global;
      fail("Python class or function " + i.global + " used as a value");
    }
    return i.value;
  }
  std::string string_of(const Item& i) const {
    if (i.kind != Item::Kind::kValue || !i.value.isString()) fail("malformed pickle (STACK_GLOBAL needs two strings)");
    return i.value.toStringRef();
  }
  c10::impl::GenericList list_at_top() {
    Item& t = top();
    if (t.kind != Item::Kind::kValue || !t.value.isList()) fail("malformed pickle (APPEND to a non-list)");
    return t.value.toList();
  }
  c10::impl::GenericDict dict_at_top() {
    Item& t = top();
    if (t.kind != Item::Kind::kValue || !t.value.isGenericDict()) fail("malformed pickle (SETITEM on a non-dict)");
    return t.value.toGenericDict();
  }
  static c10::impl::GenericDict new_dict() { return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()); }
  void set_items(c10::impl::GenericDict& dict, std::vector<Item>& items) {
    if (items.size() % 2 != 0) fail("malformed pickle (odd number of dict items)");
    for (size_t k = 0; k < items.size(); k += 2) {
      c10::IValue key = value_of(items[k]);
      if (!key.isString() && !key.isInt() && !key.isDouble() && !key.isBool() && !key.isTuple() && !key.isNone())
        fail(std::string("a dict keyed by a ") + key.tagKind() + " cannot be mapped");
      dict.insert_or_assign(std::move(key), value_of(items[k + 1]));
    }
  }
  static c10::IValue tuple_of(std::vector<Item> items) {
    std::vector<c10::IValue> v;
    v.reserve(items.size());
    for (Item& i : items) v.push_back(i.kind == Item::Kind::kValue ? std::move(i.value) : c10::IValue(i.global));
    return c10::ivalue::Tuple::create(std::move(v));
  }

  // --- what REDUCE, NEWOBJ, BUILD and BINPERSID make ---
  std::vector<c10::IValue> args_of(const std::string& what, const c10::IValue& args, size_t min_count) const {
    if (!args.isTuple()) fail(what + ": arguments are not a tuple");
    std::vector<c10::IValue> v = args.toTupleRef().elements().vec();
    if (v.size() < min_count) fail(what + ": " + std::to_string(v.size()) + " arguments, expected " +
                                   std::to_string(min_count));
    return v;
  }
  std::vector<int64_t> ints_of(const std::string& what, const c10::IValue& v) const {
    std::vector<int64_t> out;
    if (!v.isTuple()) fail(what + " is not a tuple of ints");
    for (const c10::IValue& e : v.toTupleRef().elements()) {
      if (!e.isInt()) fail(what + " is not a tuple of ints");
      out.push_back(e.toInt());
    }
    return out;
  }

  c10::IValue rebuild_tensor(const std::vector<c10::IValue>& a) {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    auto it = storage_items_.find(a[0].isString() ? a[0].toStringRef() : "");
    if (it == storage_items_.end()) fail("_rebuild_tensor_v2 without a storage");
    const auto& [storage, dtype] = it->second;
    at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype));
    if (!a[1].isInt()) fail("_rebuild_tensor_v2: storage offset is not an int");
    t.set_(storage, a[1].toInt(), ints_of("tensor size", a[2]), ints_of("tensor stride", a[3]));
    return t;
  }

  c10::IValue call(const Item& callable, const c10::IValue& args) {
    if (callable.kind != Item::Kind::kGlobal) fail("malformed pickle (REDUCE on a value)");
    const std::string& f = callable.global;
    if (f == "collections.OrderedDict") return new_dict();
    if (f == "torch.Size") return c10::ivalue::Tuple::create(
        [&] {
          std::vector<c10::IValue> dims;
          for (int64_t d : ints_of("torch.Size", args_of(f, args, 1)[0])) dims.emplace_back(d);
          return dims;
        }());
    if (f == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args_of(f, args, 4));
    if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state")
      return args_of(f, args, 1)[0];  // the data: a parameter loads as its tensor
    if (f == "torch._tensor._rebuild_from_type_v2") {
      // (func, new_type, args, state): func(*args), as a plain tensor (its Python attributes are dropped).
      std::vector<c10::IValue> a = args_of(f, args, 3);
      if (!a[0].isString() || a[0].toStringRef() != "torch._utils._rebuild_tensor_v2")
        fail("_rebuild_from_type_v2 of " + (a[0].isString() ? a[0].toStringRef() : std::string("a value")) +
             " cannot be mapped");
      return rebuild_tensor(args_of("_rebuild_tensor_v2", a[2], 4));
    }
    if (f == "builtins.getattr") {
      std::vector<c10::IValue> a = args_of(f, args, 2);
      const std::string cls = a[0].isString() ? a[0].toStringRef() : "";
      auto e = known_enums().find(cls);
      if (e != known_enums().end() && a[1].isString()) {
        auto m = e->second.find(a[1].toStringRef());
        if (m != e->second.end()) return m->second;
      }
      fail("getattr(" + (cls.empty() ? std::string("a value") : cls) + ", ...) cannot be mapped");
    }
    auto e = known_enums().find(f);
    if (e != known_enums().end()) {  // Enum(value)
      c10::IValue v = args_of(f, args, 1)[0];
      if (v.isInt()) return v;
    }
    if (plain_data_classes().count(f)) return construct(callable, args);
    fail("cannot map Python class or function " + f + " (not a state dict value deepspeed-cpp knows)");
  }

  c10::IValue construct(const Item& cls, const c10::IValue& /*args*/) {
    if (cls.kind != Item::Kind::kGlobal) fail("malformed pickle (NEWOBJ on a value)");
    if (cls.global == "collections.OrderedDict") return new_dict();
    if (!plain_data_classes().count(cls.global))
      fail("cannot map Python class " + cls.global + " (not a state dict value deepspeed-cpp knows)");
    c10::impl::GenericDict obj = new_dict();
    obj.insert(std::string("__class__"), cls.global);
    return obj;
  }

  void build(Item& target, const c10::IValue& state) {
    if (target.kind != Item::Kind::kValue) fail("malformed pickle (BUILD on a class)");
    if (target.value.isTensor()) return;  // a tensor subclass's Python attributes: dropped (see the header)
    c10::IValue attrs = state;
    if (state.isTuple() && state.toTupleRef().elements().size() == 2)  // (dict, slots)
      attrs = state.toTupleRef().elements()[0].isNone() ? state.toTupleRef().elements()[1]
                                                         : state.toTupleRef().elements()[0];
    if (attrs.isNone()) return;
    if (!target.value.isGenericDict()) fail(std::string("BUILD on a ") + target.value.tagKind() + " cannot be mapped");
    // An OrderedDict's own attributes (a module state_dict's `_metadata`, its version per submodule): dropped.
    if (!target.value.toGenericDict().contains(std::string("__class__"))) return;
    c10::impl::GenericDict obj = target.value.toGenericDict();
    if (!attrs.isGenericDict()) fail("the state of " + obj.at(std::string("__class__")).toStringRef() + " is not a dict");
    for (const auto& kv : attrs.toGenericDict()) obj.insert_or_assign(kv.key(), kv.value());
  }

  c10::IValue persistent(const c10::IValue& pid) {
    // ('storage', <torch.XStorage>, key, location, numel): the storage is made once per key and shared.
    std::vector<c10::IValue> a = args_of("persistent id", pid, 5);
    if (!a[0].isString() || a[0].toStringRef() != "storage" || !a[2].isString() || !a[4].isInt())
      fail("unsupported persistent id (not a torch storage)");
    const std::string cls = a[1].isString() ? a[1].toStringRef() : "";
    const at::ScalarType dtype = storage_dtype(cls);
    if (dtype == at::ScalarType::Undefined) fail("unsupported storage type " + cls);
    const std::string key = a[2].toStringRef();
    auto it = storages_.find(key);
    if (it == storages_.end()) it = storages_.emplace(key, load_(key, dtype, a[4].toInt())).first;
    // Tensors name the storage by its key (a string the tensor rebuilders look up).
    const std::string handle = "\x01storage:" + key;
    storage_items_[handle] = {it->second, dtype};
    return handle;
  }

  c10::IValue finish() {
    if (stack_.size() != 1) fail("malformed pickle (" + std::to_string(stack_.size()) + " values at STOP)");
    return value_of(stack_.back());
  }

  const char* start_;
  const char* p_;
  const char* end_;
  const PickleStorageLoader& load_;
  const std::string& file_;
  std::vector<Item> stack_;
  std::unordered_map<uint64_t, Item> memo_;
  std::map<std::string, c10::Storage> storages_;
  std::map<std::string, std::pair<c10::Storage, at::ScalarType>> storage_items_;
};

}  // namespace

c10::IValue read_python_pickle(const char* data, size_t size, const PickleStorageLoader& load_storage,
                               const std::string& file) {
  Machine m(data, size, load_storage, file);
  return m.run();
}

std::optional<c10::IValue> dict_get(const c10::IValue& d, const c10::IValue& key) {
  if (!d.isGenericDict()) return std::nullopt;
  const c10::impl::GenericDict dict = d.toGenericDict();
  auto it = dict.find(key);
  if (it == dict.end()) return std::nullopt;
  return it->value();
}

bool is_torch_archive(const std::string& path) {
  try {
    return caffe2::serialize::PyTorchStreamReader(path).hasRecord("data.pkl");
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace deepspeed::checkpoint

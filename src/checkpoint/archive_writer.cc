#include "checkpoint/archive_writer.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "checkpoint/python_pickle_writer.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

at::Tensor exact_storage(const at::Tensor& in) {
  at::Tensor t = in.detach();
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  const size_t own_bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (t.numel() == 0) return at::empty(t.sizes(), t.options());
  if (!t.is_non_overlapping_and_dense()) return t.clone(at::MemoryFormat::Contiguous);
  if (t.storage_offset() == 0 && t.storage().nbytes() == own_bytes) return t;
  // Dense elements inside a larger storage (a partition of a flat buffer, a slice): alias just
  // them. The deleter's copy of `t` keeps the original storage alive while the alias lives.
  // A dense tensor's lowest-addressed element is its first one only when every stride is
  // positive, which is_non_overlapping_and_dense guarantees.
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [keep = t](void*) mutable { keep.reset(); },
      t.options());
}

namespace {

c10::IValue storage_exact(const c10::IValue& value) {
  if (value.isTensor()) return exact_storage(value.toTensor());
  // Every list goes out as a plain list of Any, as Python's torch.save writes lists: the pickler
  // writes typed ones (int, float, bool, tensor lists) as torch.jit._pickle.build_* calls, which
  // Python's torch.load refuses by default since 2.6 (weights_only=True).
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    for (const c10::IValue& v : value.toListRef()) out.push_back(storage_exact(v));
    return out;
  }
  if (value.isGenericDict()) {
    c10::impl::GenericDict in = value.toGenericDict();
    c10::impl::GenericDict out(in.keyType(), in.valueType());
    for (const auto& entry : in) out.insert(entry.key(), storage_exact(entry.value()));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& v : value.toTupleRef().elements()) items.push_back(storage_exact(v));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

// miniz calls the writer from C code, which an exception must not unwind through, and
// PyTorchStreamWriter's destructor finalizes the archive (writing again) when it was not
// finalized. So the first failure is parked, every later write is swallowed, and the failure is
// rethrown once control is back in C++ between records.
class ParkedSink {
 public:
  explicit ParkedSink(const ArchiveSink& sink) : sink_(sink) {}
  size_t operator()(const void* data, size_t size) {
    if (error_) return size;
    try {
      // Bounded pieces: no single multi-GiB write() and a crash can land inside a record.
      constexpr size_t kPiece = size_t{64} << 20;
      const char* p = static_cast<const char*>(data);
      for (size_t pos = 0; pos < size; pos += kPiece) sink_(p + pos, std::min(kPiece, size - pos));
      bytes_ += static_cast<int64_t>(size);
    } catch (...) {
      error_ = std::current_exception();
    }
    return size;
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  const ArchiveSink& sink_;
  std::exception_ptr error_;
  int64_t bytes_ = 0;
};

}  // namespace

std::string first_line(const char* what) {
  std::string s = what;
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

namespace {

// data.pkl, then each storage as data/<i>.
int64_t write_records(const std::vector<char>& pickle, const std::vector<at::Tensor>& storages,
                      const ArchiveSink& sink) {
  ParkedSink parked(sink);
  auto write = [&](const void* p, size_t n) { return parked(p, n); };
  caffe2::serialize::PyTorchStreamWriter writer(write);
  try {
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    parked.rethrow();
    for (size_t i = 0; i < storages.size(); ++i) {
      const at::Storage& s = storages[i].storage();
      writer.writeRecord("data/" + std::to_string(i), s.data(), s.nbytes());
      parked.rethrow();
    }
    writer.writeEndOfFile();
    parked.rethrow();
  } catch (const c10::Error& e) {
    parked.rethrow();  // a parked sink failure is the real cause
    throw CheckpointError("cannot write torch archive: " + first_line(e.what_without_backtrace()));
  }
  return parked.bytes();
}

}  // namespace

int64_t write_torch_archive(const c10::IValue& value, const ArchiveSink& sink) {
  c10::IValue exact = storage_exact(value);
  // No tensor table: the pickler then refers to tensors the way torch.save does (persistent ids
  // naming storages "0", "1", ...) and collects the storages for us in tensorData(). No type tags
  // on dicts and lists (torch.jit._pickle.restore_type_tag calls), as Python's torch.save writes
  // none: Python's torch.load refuses them by default since 2.6 (weights_only=True).
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* p, size_t n) { pickle.insert(pickle.end(), p, p + n); }, nullptr, nullptr,
      nullptr, /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(exact);
  pickler.stop();
  return write_records(pickle, pickler.tensorData(), sink);
}

int64_t write_python_archive(const c10::IValue& value, const ArchiveSink& sink) {
  std::vector<at::Tensor> storages;
  const std::vector<char> pickle = write_python_pickle(value, &storages);
  return write_records(pickle, storages, sink);
}

std::vector<char> torch_archive_bytes(const c10::IValue& value) {
  std::vector<char> bytes;
  write_torch_archive(value, [&](const char* p, size_t n) { bytes.insert(bytes.end(), p, p + n); });
  return bytes;
}

}  // namespace deepspeed::checkpoint

// save_state / load_state: a StateDict to and from torch's zip format.
//
// Writing streams the archive into the crash-safe temporary file (archive_writer.h): each tensor's
// bytes go from its memory to the file once, and a view writes only its own elements. Reading does
// what torch::pickle_load does (PyTorchStreamReader + Unpickler) with one difference: tensor
// storages point into the file's bytes (a shared buffer or a private mapping) instead of being
// copied out record by record, so a load costs one read of the file and a mapped load only what is
// touched.
//
// Every record's CRC-32 (zip_records.h) is checked at load, or, for callers that map a file and
// read a part of it, per record when they ask (verify_tensor): the table and which records passed
// live with the file's bytes, which every loaded tensor keeps alive.
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "checkpoint/python_pickle.h"
#include "checkpoint/zip_records.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

// Bytes of a whole file, kept alive by every tensor that points into them, with the file's record
// table so a tensor's record can be checked after the load.
class FileBytes {
 public:
  virtual ~FileBytes() = default;
  virtual const char* data() const = 0;
  virtual size_t size() const = 0;

  void set_records(std::string name, std::vector<ZipRecord> records) {
    name_ = std::move(name);
    records_ = std::move(records);
    verified_.assign(records_.size(), false);
  }
  // Checks the record holding byte `pos` once; `what` names its entry in the error.
  void verify_at(size_t pos, const std::string& what) {
    auto it = std::upper_bound(records_.begin(), records_.end(), pos,
                               [](size_t p, const ZipRecord& r) { return p < r.offset; });
    if (it == records_.begin()) return;
    --it;
    if (pos >= it->offset + std::max<uint64_t>(it->size, 1)) return;
    const size_t i = static_cast<size_t>(it - records_.begin());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (verified_[i]) return;
    }
    // Outside the lock: two threads may check the same record, which costs time, not correctness.
    verify_zip_record(data(), *it, name_, what);
    std::lock_guard<std::mutex> lock(mu_);
    verified_[i] = true;
  }
  const std::vector<ZipRecord>& records() const { return records_; }

 private:
  std::string name_;
  std::vector<ZipRecord> records_;
  std::vector<bool> verified_;
  std::mutex mu_;
};

class VectorBytes : public FileBytes {
 public:
  explicit VectorBytes(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  const char* data() const override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
};

// Opens `path` for reading and returns its descriptor and size; the error names the file.
int open_for_reading(const std::string& path, size_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) throw CheckpointError("checkpoint file " + path + " is missing");
  DS_CHECK_T(CheckpointError, fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw CheckpointError("cannot stat " + path + ": " + std::strerror(err));
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

class MappedBytes : public FileBytes {
 public:
  explicit MappedBytes(const std::string& path) {
    int fd = open_for_reading(path, &size_);
    if (size_ > 0) {
      // Private and writable: callers may modify loaded tensors in place without touching the file.
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);
      DS_CHECK_T(CheckpointError, p != MAP_FAILED, "cannot map ", path, ": ", std::strerror(err));
      data_ = static_cast<char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedBytes() override {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  const char* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// The file read into anonymous memory. Not a std::vector: that would zero every byte first, a
// whole extra pass. The memory is 2 MiB-aligned and advised for huge pages: touching fresh memory
// costs one page fault per page, and at 4 KiB pages those faults, not the read, were most of a
// load's time (measured: 0.13 GB/s to fault in fresh 4 KiB pages on this VM, >5 GB/s with huge
// pages once the kernel has them).
class ReadBytes : public FileBytes {
 public:
  explicit ReadBytes(const std::string& path) {
    int fd = open_for_reading(path, &size_);
    try {
      if (size_ > 0) {
        allocate(path);
        read_all(fd, path);
      }
    } catch (...) {
      ::close(fd);
      release();
      throw;
    }
    ::close(fd);
  }
  ~ReadBytes() override { release(); }
  const char* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;

  void allocate(const std::string& path) {
    mapped_ = (size_ + kHugePage - 1) / kHugePage * kHugePage;
    // Over-reserve by one huge page and trim, so the whole buffer is huge-page aligned.
    const size_t reserve = mapped_ + kHugePage;
    void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    DS_CHECK_T(CheckpointError, p != MAP_FAILED, "cannot allocate ", reserve, " bytes to read ",
               path, ": ", std::strerror(errno));
    const auto base = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > base) ::munmap(p, aligned - base);
    const size_t tail = base + reserve - (aligned + mapped_);
    if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + mapped_), tail);
    data_ = reinterpret_cast<char*>(aligned);
    ::madvise(data_, mapped_, MADV_HUGEPAGE);  // a hint: refused, it only costs speed
  }

  void read_all(int fd, const std::string& path) {
    size_t done = 0;
    while (done < size_) {
      // Bounded reads: Linux caps one read() near 2 GiB anyway.
      ssize_t n = ::read(fd, data_ + done, std::min<size_t>(size_ - done, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      DS_CHECK_T(CheckpointError, n > 0, "cannot read ", path, ": ",
                 n == 0 ? "unexpected end of file" : std::strerror(errno));
      done += static_cast<size_t>(n);
    }
  }

  void release() {
    if (data_ != nullptr) ::munmap(data_, mapped_);
    data_ = nullptr;
  }

  char* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

class BytesReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(std::shared_ptr<FileBytes> bytes) : bytes_(std::move(bytes)) {}
  size_t size() const override { return bytes_->size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    if (pos >= bytes_->size()) return 0;
    n = std::min<size_t>(n, bytes_->size() - pos);
    std::memcpy(buf, bytes_->data() + pos, n);
    return n;
  }

 private:
  std::shared_ptr<FileBytes> bytes_;
};

void release_bytes(void* ctx) { delete static_cast<std::shared_ptr<FileBytes>*>(ctx); }

// Every storage must lie inside the file: a corrupt record table must not make tensors read past
// it.
void check_storages(const c10::IValue& value, const FileBytes& bytes, const std::string& name) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    const char* p = static_cast<const char*>(t.storage().data());
    size_t n = t.storage().nbytes();
    DS_CHECK_T(
        CheckpointError, n == 0 || (p >= bytes.data() && p + n <= bytes.data() + bytes.size()),
        "checkpoint file ", name, " is corrupt: a tensor's ", n, " bytes lie outside the file");
  } else if (value.isGenericDict()) {
    for (const auto& e : value.toGenericDict()) check_storages(e.value(), bytes, name);
  } else if (value.isList()) {
    for (const c10::IValue& v : value.toList()) check_storages(v, bytes, name);
  } else if (value.isTuple()) {
    for (const c10::IValue& v : value.toTupleRef().elements()) check_storages(v, bytes, name);
  }
}

// The first entry path ('/'-joined keys and list indices) of each storage, so a failed record
// names what it holds.
void storage_paths(const c10::IValue& value, const std::string& path,
                   std::map<const void*, std::string>& out) {
  if (value.isTensor()) {
    out.emplace(value.toTensor().storage().data(), path);
  } else if (value.isGenericDict()) {
    for (const auto& e : value.toGenericDict()) {
      const std::string key = e.key().isString() ? e.key().toStringRef() : "?";
      storage_paths(e.value(), path.empty() ? key : path + "/" + key, out);
    }
  } else if (value.isList()) {
    c10::impl::GenericList list = value.toList();
    for (size_t i = 0; i < list.size(); ++i)
      storage_paths(list.get(i), path + "/" + std::to_string(i), out);
  } else if (value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    for (size_t i = 0; i < items.size(); ++i)
      storage_paths(items[i], path + "/" + std::to_string(i), out);
  }
}

// Dicts as callers expect them whatever the pickle recorded: one whose keys are all strings becomes
// Dict[str, Any], at every depth. A plain pickle (Python's torch.save, and ours) records no key or
// value types, so its dicts come out as Dict[Any, Any]; older files of ours recorded them.
c10::IValue retagged(const c10::IValue& value) {
  if (value.isGenericDict()) {
    c10::impl::GenericDict in = value.toGenericDict();
    bool string_keys = true;
    for (const auto& e : in) string_keys = string_keys && e.key().isString();
    c10::impl::GenericDict out(string_keys ? c10::StringType::get() : in.keyType(), c10::AnyType::get());
    for (const auto& e : in) out.insert(e.key(), retagged(e.value()));
    return out;
  }
  if (value.isList() && !value.isTensorList() && !value.isIntList() && !value.isDoubleList() &&
      !value.isBoolList()) {
    c10::impl::GenericList in = value.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& v : in) out.push_back(retagged(v));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& v : value.toTupleRef().elements()) items.push_back(retagged(v));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

// A torch zip archive over `bytes`: its record table read (for CRC checks), its pickle's checksum verified, and
// torch's reader over it. Throws CheckpointError naming the file when it is not such an archive.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::shared_ptr<FileBytes>& bytes,
                                                                     const std::string& name) {
  static const char kZipMagic[4] = {'P', 'K', '\x03', '\x04'};
  DS_CHECK_T(CheckpointError, bytes->size() >= 4 && std::memcmp(bytes->data(), kZipMagic, 4) == 0,
             "checkpoint file ", name, " is not a checkpoint (",
             bytes->size() < 4 ? "shorter than a zip header" : "no zip header", ", ", bytes->size(),
             " bytes)");
  bytes->set_records(name, read_zip_records(bytes->data(), bytes->size(), name));
  // The pickle first: it is small, and a damaged one would otherwise surface as a baffling
  // unpickling error.
  for (const ZipRecord& r : bytes->records())
    if (r.name.ends_with("/data.pkl")) bytes->verify_at(r.offset, "data.pkl");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<BytesReadAdapter>(bytes));
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint file " + name + " is truncated or corrupt (" +
                          std::to_string(bytes->size()) +
                          " bytes): " + first_line(e.what_without_backtrace()));
  }
  DS_CHECK_T(CheckpointError, reader->hasRecord("data.pkl"), "checkpoint file ", name,
             " is a zip archive but not a torch.save/pickle_save file (no data.pkl)");
  return reader;
}

// Checks every record's CRC-32, naming the entry each holds.
void verify_records(const c10::IValue& value, FileBytes& bytes) {
  std::map<const void*, std::string> paths;
  storage_paths(value, "", paths);
  for (const ZipRecord& r : bytes.records()) {
    auto it = paths.find(bytes.data() + r.offset);
    bytes.verify_at(r.offset, it == paths.end() ? "" : it->second);
  }
}

// A storage that points into the file's bytes (and keeps them alive) instead of a copy.
at::DataPtr record_data(const std::shared_ptr<FileBytes>& bytes, caffe2::serialize::PyTorchStreamReader& reader,
                        const std::string& key, const std::string& name) {
  size_t offset = reader.getRecordOffset("data/" + key);
  DS_CHECK_T(CheckpointError, offset <= bytes->size(), "checkpoint file ", name,
             " is corrupt: record data/", key, " starts past the end");
  char* p = const_cast<char*>(bytes->data()) + offset;
  return at::DataPtr(p, new std::shared_ptr<FileBytes>(bytes), &release_bytes, at::Device(at::kCPU));
}

std::shared_ptr<FileBytes> file_bytes(const std::string& path, const LoadOptions& options) {
  if (options.mmap) return std::make_shared<MappedBytes>(path);
  if (options.fs == nullptr || options.fs == default_file_system()) return std::make_shared<ReadBytes>(path);
  return std::make_shared<VectorBytes>(options.fs->read_file(path));
}

StateDict parse(std::shared_ptr<FileBytes> bytes, const std::string& name, bool verify_all) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader = open_archive(bytes, name);
  c10::IValue value;
  try {
    at::DataPtr pickle;
    size_t pickle_size = 0;
    std::tie(pickle, pickle_size) = reader->getRecord("data.pkl");
    const char* pickle_bytes = static_cast<const char*>(pickle.get());
    size_t consumed = 0;
    auto read = [&](char* buf, size_t n) -> size_t {
      n = std::min(n, pickle_size - consumed);
      std::memcpy(buf, pickle_bytes + consumed, n);
      consumed += n;
      return n;
    };
    auto read_record = [&](const std::string& key) -> at::DataPtr {
      return record_data(bytes, *reader, key, name);
    };
    torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::nullopt);
    unpickler.set_version(reader->version());
    value = unpickler.parse_ivalue();
  } catch (const CheckpointError&) {
    throw;
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint file " + name +
                          " cannot be unpickled: " + first_line(e.what_without_backtrace()));
  }
  check_storages(value, *bytes, name);
  if (verify_all) verify_records(value, *bytes);
  DS_CHECK_T(CheckpointError, value.isGenericDict(), "checkpoint file ", name, " holds a ",
             value.tagKind(), ", not a dict");
  value = retagged(value);
  c10::impl::GenericDict dict = value.toGenericDict();
  DS_CHECK_T(CheckpointError, dict.keyType()->kind() == c10::TypeKind::StringType,
             "checkpoint file ", name, " holds a dict keyed by ", dict.keyType()->str(),
             ", not by strings");
  return c10::impl::toTypedDict<std::string, c10::IValue>(dict);
}

}  // namespace

c10::impl::GenericDict make_any_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

StateDict make_state_dict() {
  return c10::impl::toTypedDict<std::string, c10::IValue>(make_any_dict());
}

c10::impl::GenericList make_any_list() { return c10::impl::GenericList(c10::AnyType::get()); }

std::vector<char> serialize_state(const StateDict& state) {
  return torch_archive_bytes(c10::IValue(state));
}

void save_state(const std::string& path, const StateDict& state, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) fs->create_dirs(path.substr(0, slash));
  write_file_atomic(
      path,
      [&](WritableFile& file) {
        write_torch_archive(c10::IValue(state),
                            [&](const char* data, size_t size) { file.append(data, size); });
      },
      fs);
}

StateDict deserialize_state(std::vector<char> bytes, const std::string& name) {
  return parse(std::make_shared<VectorBytes>(std::move(bytes)), name, /*verify_all=*/true);
}

StateDict load_state(const std::string& path, const LoadOptions& options) {
  return parse(file_bytes(path, options), path, options.verify_checksums);
}

c10::IValue load_python_torch_file(const std::string& path, const LoadOptions& options) {
  std::shared_ptr<FileBytes> bytes = file_bytes(path, options);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader = open_archive(bytes, path);
  c10::IValue value;
  try {
    auto [pickle, pickle_size] = reader->getRecord("data.pkl");
    auto load = [&](const std::string& key, at::ScalarType dtype, int64_t numel) {
      DS_CHECK_T(CheckpointError, reader->hasRecord("data/" + key), "checkpoint file ", path, " has no record data/",
                 key);
      const size_t want = static_cast<size_t>(numel) * c10::elementSize(dtype);
      const size_t have = reader->getRecordSize("data/" + key);
      DS_CHECK_T(CheckpointError, have >= want, "checkpoint file ", path, ": record data/", key, " holds ", have,
                 " bytes, its storage needs ", want);
      return c10::Storage(c10::Storage::use_byte_size_t(), have, record_data(bytes, *reader, key, path),
                          /*allocator=*/nullptr, /*resizable=*/false);
    };
    value = read_python_pickle(static_cast<const char*>(pickle.get()), pickle_size, load, path);
  } catch (const c10::Error& e) {
    throw CheckpointError("checkpoint file " + path + " is corrupt: " + first_line(e.what_without_backtrace()));
  }
  check_storages(value, *bytes, path);
  if (options.verify_checksums) verify_records(value, *bytes);
  return value;
}

namespace {

// The file bytes behind the first tensor of `value` that load_state mapped or read, or null.
std::shared_ptr<FileBytes> bytes_behind(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || !t.has_storage()) return nullptr;
    const at::DataPtr& ptr = t.storage().data_ptr();
    if (ptr.get_deleter() != &release_bytes) return nullptr;
    return *static_cast<std::shared_ptr<FileBytes>*>(ptr.get_context());
  }
  std::vector<c10::IValue> items;
  if (value.isGenericDict()) {
    for (const auto& e : value.toGenericDict()) items.push_back(e.value());
  } else if (value.isList()) {
    for (const c10::IValue& v : value.toListRef()) items.push_back(v);
  } else if (value.isTuple()) {
    for (const c10::IValue& v : value.toTupleRef().elements()) items.push_back(v);
  }
  for (const c10::IValue& v : items)
    if (std::shared_ptr<FileBytes> b = bytes_behind(v)) return b;
  return nullptr;
}

}  // namespace

void verify_record_share(const StateDict& state, int share, int shares) {
  DS_ASSERT(shares >= 1 && share >= 0 && share < shares, "share ", share, " of ", shares);
  const std::shared_ptr<FileBytes> bytes = bytes_behind(state);
  if (bytes == nullptr) return;
  std::map<const void*, std::string> paths;
  storage_paths(state, "", paths);
  const std::vector<ZipRecord>& records = bytes->records();
  for (size_t i = static_cast<size_t>(share); i < records.size(); i += static_cast<size_t>(shares)) {
    auto it = paths.find(bytes->data() + records[i].offset);
    bytes->verify_at(records[i].offset, it == paths.end() ? "" : it->second);
  }
}

void verify_tensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined() || !t.has_storage()) return;
  const at::DataPtr& ptr = t.storage().data_ptr();
  if (ptr.get_deleter() != &release_bytes) return;  // not from load_state
  auto& bytes = *static_cast<std::shared_ptr<FileBytes>*>(ptr.get_context());
  const char* p = static_cast<const char*>(ptr.get());
  bytes->verify_at(static_cast<size_t>(p - bytes->data()), what);
}

}  // namespace deepspeed::checkpoint

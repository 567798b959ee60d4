// c10d adapter: ProcessGroupGloo, TCPStore/HashStore/PrefixStore and c10d::Work, and the probe of
// what the running LibTorch's Gloo does natively. Everything LibTorch-version-dependent in
// deepspeed::comm lives in this file (see c10d_backend.h).
#include "comm/c10d_backend.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/csrc/api/include/torch/version.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/nccl_group.h"
#include "comm/port_probe.h"

namespace deepspeed::comm::detail {
namespace {

// c10::Error::what() carries a C++ backtrace; users need the first line.
std::string short_message(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

// Gloo reports timeouts and lost peers as gloo::IoException and c10d as c10::Error; only their text
// tells them apart, so classify by it.
[[noreturn]] void rethrow_classified(const std::exception& e) {
  std::string msg = short_message(e);
  if (contains(msg, "Timed out") || contains(msg, "timed out") || contains(msg, "Timeout") ||
      contains(msg, "timeout")) {
    throw CommTimeoutError(msg);
  }
  if (contains(msg, "Connection closed") || contains(msg, "Connection reset") ||
      contains(msg, "Broken pipe") || contains(msg, "Connection refused")) {
    throw PeerLostError(msg);
  }
  throw CommError(msg);
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg:
      return c10d::ReduceOp::AVG;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
  }
  DS_ASSERT(false, "unknown ReduceOp");
}

class C10dWork : public BackendWork {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout, bool await_release)
      : work_(std::move(work)), timeout_(timeout), await_release_(await_release) {}

  void wait() override {
    try {
      // Gloo enforces the group timeout itself; passing it here too guards any path that would not. On NCCL the
      // wait orders the current stream after the collective (the host goes on at once).
      work_->wait(timeout_);
    } catch (const std::exception& e) {
      rethrow_classified(e);
    }
    if (await_release_) await_backend_release();
  }

  bool is_completed() override {
    try {
      return work_->isCompleted();
    } catch (const std::exception& e) {
      rethrow_classified(e);
    }
  }

 private:
  // Gloo's worker thread marks a collective complete and only then drops its own reference to the work (and with
  // it the tensors the collective used). Waiting for that moment, briefly, makes "the caller frees a buffer after
  // wait()" free its memory then, not a moment later while the caller already allocates the next one: without it
  // a stage-3 backward could hold one more gradient buffer than its schedule says, depending on thread timing.
  void await_backend_release() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (work_.use_count() > 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_;
  bool await_release_;  // Gloo only: NCCL's watchdog keeps its reference until the device is done
};

class C10dStore : public KeyValueStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    try {
      std::vector<uint8_t> v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      rethrow_classified(e);
    }
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  void remove(const std::string& key) override { store_->deleteKey(key); }
  std::shared_ptr<KeyValueStore> with_prefix(const std::string& prefix) override {
    return std::make_shared<C10dStore>(c10::make_intrusive<c10d::PrefixStore>(prefix, store_));
  }

  const c10::intrusive_ptr<c10d::Store>& raw() const { return store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

bool is_loopback(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address of this host's interface that routes to `master_addr`: a UDP socket "connected" to it
// sends nothing but learns its source address. Empty when the master cannot be resolved or
// routed to.
std::string address_towards(const std::string& master_addr) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(master_addr.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local = {};
  socklen_t len = sizeof(local);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a = local.ss_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (::inet_ntop(local.ss_family, a, buf, sizeof(buf)) != nullptr) out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// Runs `issue` on the probe group; false when Gloo refuses the op or dtype (at issue or at wait).
bool probe_op(const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  try {
    issue()->wait();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// What this LibTorch's Gloo does natively, found by trying each op once on a private one-rank group
// over an in-process store: no peer takes part, so a refusal cannot leave another rank waiting, and
// every rank of a job (same LibTorch) reaches the same answer. A refusal is an exception at issue
// or at wait ("Invalid scalar type", "does not support"), which one rank sees as well as many; the
// dist test comm_capabilities checks the answer against real multi-rank runs.
BackendCapabilities probe_gloo() {
  BackendCapabilities caps;
  caps.backend = "gloo";
  caps.library_version = TORCH_VERSION;
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(30000));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::HashStore>(), 0, 1, opts);
  const auto ones = [](at::ScalarType t, int64_t n) { return at::ones({n}, at::TensorOptions().dtype(t)); };
  for (at::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar, at::kByte, at::kShort,
                           at::kInt, at::kLong}) {
    if (probe_op([&] {
          std::vector<at::Tensor> v{ones(t, 4)};
          return pg->allreduce(v);
        })) {
      caps.reduce_dtypes.push_back(t);
    }
  }
  caps.avg = probe_op([&] {
    std::vector<at::Tensor> v{ones(at::kFloat, 4)};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::AVG;
    return pg->allreduce(v, o);
  });
  caps.all_gather_into_tensor = probe_op([&] {
    at::Tensor out = at::empty({4}, at::kByte), in = ones(at::kByte, 4);
    return pg->_allgather_base(out, in);
  });
  caps.reduce_scatter_tensor = probe_op([&] {
    at::Tensor out = at::empty({4}), in = ones(at::kFloat, 4);
    return pg->_reduce_scatter_base(out, in);
  });
  caps.in_place_by_owner = true;  // see BackendCapabilities: c10d's Gloo stages whole-buffer copies in flat calls
  return caps;
}

// DS_COMM_PARTITIONED_FORM=flat|per_owner: the form of ZeRO's partitioned collectives (default: the native flat
// call, except in-place ones, which go per owner: BackendCapabilities::in_place_by_owner). Per owner measured faster
// for large all-gathers on Gloo and slower for small ones and for reduce-scatter (bench_comm_bandwidth, README), so
// it is a choice, not the default; "flat" makes in-place calls flat too. Anything else is an error naming the
// variable.
BackendCapabilities with_partitioned_form(BackendCapabilities caps) {
  const char* form = std::getenv("DS_COMM_PARTITIONED_FORM");
  if (form == nullptr || *form == '\0') return caps;
  const std::string f = form;
  DS_CHECK_T(CommError, f == "flat" || f == "per_owner", "DS_COMM_PARTITIONED_FORM must be flat or per_owner, got '",
             f, "'");
  caps.per_owner_partitioned = f == "per_owner";
  if (f == "flat") caps.in_place_by_owner = false;
  return caps;
}

// DS_COMM_FORCE_FALLBACKS=1 makes every op the probe found native run through its fallback, as on a
// Gloo that lacks them (LibTorch 1.13: no AVG, no flat collectives, no bfloat16 arithmetic), so the
// fallbacks stay tested on a LibTorch that no longer needs them.
BackendCapabilities forced_fallbacks(BackendCapabilities caps) {
  caps.avg = false;
  caps.all_gather_into_tensor = false;
  caps.reduce_scatter_tensor = false;
  caps.per_owner_partitioned = false;
  caps.in_place_by_owner = false;  // so in-place calls exercise the fallbacks too
  std::erase_if(caps.reduce_dtypes, [](at::ScalarType t) { return t == at::kBFloat16 || t == at::kShort; });
  caps.fallbacks_forced = true;
  return caps;
}

const BackendCapabilities& gloo_capabilities() {
  static const BackendCapabilities caps = [] {  // once per process (thread-safe static)
    const char* force = std::getenv("DS_COMM_FORCE_FALLBACKS");
    const bool forced = force != nullptr && (std::string(force) == "1" || std::string(force) == "true");
    return forced ? forced_fallbacks(probe_gloo()) : with_partitioned_form(probe_gloo());
  }();
  return caps;
}

// Gloo's process group, on the network interface that reaches the master.
c10::intrusive_ptr<c10d::Backend> make_gloo_group(const BackendOptions& o, const c10::intrusive_ptr<c10d::Store>& store) {
  auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
  // Like torch: GLOO_SOCKET_IFNAME picks the interface; a local master means every rank is on
  // this host. Otherwise the interface that reaches the master: torch's default (the address
  // the host name resolves to) is loopback on many machines (Debian's 127.0.1.1 entry), which
  // peers on other hosts cannot connect to.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (is_loopback(o.master_addr)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else if (const std::string local = address_towards(o.master_addr); !local.empty() && !is_loopback(local)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.size, opts);
}

// Any c10d backend (Gloo, NCCL) behind our Backend interface: the calls are c10d's virtuals.
class C10dBackend : public Backend {
 public:
  // `caps` is called on first use, not here: a bad DS_COMM_* variable then fails the first collective, where the
  // caller can catch it, not the group's construction.
  C10dBackend(std::string name, const BackendCapabilities& (*caps)(), c10::intrusive_ptr<c10d::Backend> pg,
              std::chrono::milliseconds timeout)
      : name_(std::move(name)), caps_(caps), timeout_(timeout), pg_(std::move(pg)) {}

  std::string name() const override { return name_; }

  const BackendCapabilities& capabilities() const override { return caps_(); }

  BackendWorkPtr all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    std::vector<at::Tensor> v{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap([&] { return pg_->allreduce(v, opts); });
  }
  BackendWorkPtr reduce(const at::Tensor& tensor, int root, ReduceOp op) override {
    std::vector<at::Tensor> v{tensor};
    c10d::ReduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.rootRank = root;
    return wrap([&] { return pg_->reduce(v, opts); });
  }
  BackendWorkPtr broadcast(const at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> v{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return wrap([&] { return pg_->broadcast(v, opts); });
  }
  BackendWorkPtr all_gather(const std::vector<at::Tensor>& outputs,
                            const at::Tensor& input) override {
    std::vector<std::vector<at::Tensor>> outs{outputs};
    std::vector<at::Tensor> ins{input};
    return wrap([&] { return pg_->allgather(outs, ins); });
  }
  BackendWorkPtr all_gather_base(const at::Tensor& output, const at::Tensor& input) override {
    at::Tensor out = output, in = input;
    return wrap([&] { return pg_->_allgather_base(out, in); });
  }
  BackendWorkPtr reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                     ReduceOp op) override {
    at::Tensor out = output, in = input;
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op);
    return wrap([&] { return pg_->_reduce_scatter_base(out, in, opts); });
  }
  BackendWorkPtr all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                   const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override {
    at::Tensor out = output, in = input;
    std::vector<int64_t> os = output_splits, is = input_splits;
    return wrap([&] { return pg_->alltoall_base(out, in, os, is); });
  }
  BackendWorkPtr send(const at::Tensor& tensor, int dst, int tag) override {
    std::vector<at::Tensor> v{tensor};
    return wrap([&] { return pg_->send(v, dst, tag); });
  }
  BackendWorkPtr recv(const at::Tensor& tensor, int src, int tag) override {
    std::vector<at::Tensor> v{tensor};
    return wrap([&] { return pg_->recv(v, src, tag); });
  }
  BackendWorkPtr barrier() override {
    return wrap([&] { return pg_->barrier(); });
  }

 private:
  // c10d validates arguments when an op is issued; report those failures as ours.
  template <typename F>
  BackendWorkPtr wrap(F&& issue) {
    try {
      return std::make_unique<C10dWork>(issue(), timeout_, /*await_release=*/name_ == "gloo");
    } catch (const std::exception& e) {
      rethrow_classified(e);
    }
  }

  std::string name_;
  const BackendCapabilities& (*caps_)();
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Backend> pg_;
};

}  // namespace

std::shared_ptr<KeyValueStore> create_tcp_store(const std::string& host, int port, bool is_server,
                                                int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = is_server;
  opts.numWorkers = static_cast<size_t>(world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
  const std::string port_in_use = ::deepspeed::detail::str_cat(
      "could not host the rendezvous store on ", host, ":", port, " (MASTER_ADDR/MASTER_PORT): port ", port,
      " is already in use (another job, or one still exiting); pick another with the launcher's --master_port");
  // Checked first: c10d logs four glog lines for a port in use before it throws.
  if (is_server && tcp_port_in_use(port)) throw CommError(port_in_use);
  try {
    return std::make_shared<C10dStore>(c10::make_intrusive<c10d::TCPStore>(host, opts));
  } catch (const std::exception& e) {
    // Another rank 0 may take the port between the probe above and c10d's listen (two jobs started together): the
    // same one line as the probe's.
    const std::string what = e.what();
    if (is_server && (contains(what, "EADDRINUSE") || contains(what, "ddress already in use")))
      throw CommError(port_in_use);
    std::string msg = ::deepspeed::detail::str_cat(
        is_server ? "could not host the rendezvous store on port "
                  : "could not reach the rendezvous store at ",
        host, ":", port, " (MASTER_ADDR/MASTER_PORT): ", short_message(e));
    if (contains(msg, "imeout") || contains(msg, "imed out")) throw CommTimeoutError(msg);
    throw CommError(msg);
  }
}

std::shared_ptr<KeyValueStore> create_local_store() {
  return std::make_shared<C10dStore>(c10::make_intrusive<c10d::HashStore>());
}

const BackendCapabilities& capabilities_of(const std::string& backend) {
  if (backend == "gloo") return gloo_capabilities();
  check_nccl_usable(backend);
  return nccl_capabilities();
}

std::unique_ptr<Backend> create_backend(const BackendOptions& options,
                                        const std::shared_ptr<KeyValueStore>& store) {
  auto* c10d_store = dynamic_cast<C10dStore*>(store.get());
  DS_ASSERT(c10d_store != nullptr, "store was not made by this adapter");
  const bool gloo = options.name == "gloo";
  if (!gloo) check_nccl_usable(options.name);
  try {
    auto pg = gloo ? make_gloo_group(options, c10d_store->raw()) : make_nccl_group(options, c10d_store->raw());
    return std::make_unique<C10dBackend>(options.name, gloo ? &gloo_capabilities : &nccl_capabilities, pg,
                                         options.timeout);
  } catch (const std::exception& e) {
    throw CommError(::deepspeed::detail::str_cat("could not connect ", options.name, " group of ", options.size,
                                                 " ranks (this is rank ", options.rank, "): ", short_message(e)));
  }
}

}  // namespace deepspeed::comm::detail

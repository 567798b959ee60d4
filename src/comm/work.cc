// See work_impl.h.
#include "comm/collective_check.h"
#include "comm/comms_logger.h"
#include "comm/work_impl.h"
#include "deepspeed/accelerator.h"

namespace deepspeed::comm {

using ::deepspeed::detail::str_cat;

namespace detail {

std::exception_ptr with_context(const CallInfo& info, std::exception_ptr e) {
  std::string where = str_cat(info.label, " ", info.description, " on group ", info.group_name);
  try {
    std::rethrow_exception(e);
  } catch (const PeerLostError& ex) {
    return std::make_exception_ptr(CommTimeoutError(
        str_cat("rank ", info.global_rank, " lost a peer in ", where, ": ", ex.what())));
  } catch (const CommTimeoutError& ex) {
    return std::make_exception_ptr(
        CommTimeoutError(str_cat("rank ", info.global_rank, " timed out after ",
                                 format_duration(info.timeout), " in ", where, ": ", ex.what())));
  } catch (const std::exception& ex) {
    return std::make_exception_ptr(
        CommError(str_cat("rank ", info.global_rank, " failed in ", where, ": ", ex.what())));
  }
}

}  // namespace detail

Work::Impl::Impl(detail::Pending pending, detail::CallInfo info)
    : pending_(std::move(pending)), info_(std::move(info)) {}

void Work::Impl::fail_locked(std::exception_ptr e) {
  error_ = detail::with_context(info_, e);
  done_ = true;
  pending_.finalize = nullptr;
  std::rethrow_exception(error_);
}

void Work::Impl::complete_locked() {
  if (pending_.finalize) pending_.finalize();
  if (info_.log) {
    // On a device, wait() returning means the collective is queued ahead of later work, not done: the logger's
    // latency is the host's wait for the device (DeepSpeed's comms logger synchronizes the same way). CPU: no-op.
    accelerator::get_accelerator().synchronize();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - info_.start)
            .count();
    detail::CommsLogger::instance().record(
        info_.op, info_.msg_bytes, ms, info_.group_size,
        str_cat(info_.label, " on group ", info_.group_name, ", rank ", info_.global_rank));
  }
  done_ = true;
  // Drop staging buffers now. The backend work stays: wait() may be using it outside the lock.
  pending_.finalize = nullptr;
}

void Work::Impl::wait() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    if (done_) return;
  }
  // Block outside the lock so is_completed() from another thread does not wait behind us.
  std::exception_ptr failure;
  try {
    if (pending_.work) pending_.work->wait();
  } catch (...) {
    failure = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (done_) return;
  if (failure) fail_locked(failure);
  try {
    complete_locked();
  } catch (...) {
    fail_locked(std::current_exception());
  }
}

bool Work::Impl::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (done_) return true;
  try {
    if (pending_.work && !pending_.work->is_completed()) return false;
    // The transfer is done; wait() returns at once and surfaces its error if it failed.
    if (pending_.work) pending_.work->wait();
    complete_locked();
  } catch (...) {
    fail_locked(std::current_exception());
  }
  return true;
}

void Work::wait() {
  if (impl_) impl_->wait();
}

bool Work::is_completed() { return impl_ ? impl_->is_completed() : true; }

}  // namespace deepspeed::comm

// A FileSystem for tests, in the spirit of LevelDB's fault_injection_test: it forwards to the real
// file system, records every call, and can "crash" the process after a byte budget: the append that
// crosses the budget writes only the bytes that fit and throws SimulatedCrash, and every later call
// throws too (a dead process cleans nothing up), so the disk is left exactly as a kill at that byte
// would leave it.
#pragma once

#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint::testing {

struct SimulatedCrash : std::runtime_error {
  SimulatedCrash() : std::runtime_error("simulated crash") {}
};

class FaultInjectionFileSystem : public FileSystem {
 public:
  // crash_after_bytes < 0: never crash.
  explicit FaultInjectionFileSystem(int64_t crash_after_bytes = -1) : budget_(crash_after_bytes) {}

  std::vector<std::string> log;  // "create <path>", "append <path> <n>", "sync <path>", "close
                                 // <path>", "rename <from> <to>", "sync_dir <dir>", "remove
                                 // <path>", "remove_dir <dir>"
  int64_t bytes_written = 0;
  bool crashed = false;
  // Die for real at the crash point (SIGKILL: no destructor, no cleanup) instead of throwing; for a
  // save run in a child process whose leftovers another process then finds.
  bool kill_process = false;

  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    alive();
    log.push_back("create " + path);
    return std::make_unique<File>(this, path, base()->new_writable_file(path));
  }
  void rename_file(const std::string& from, const std::string& to) override {
    alive();
    log.push_back("rename " + from + " " + to);
    base()->rename_file(from, to);
  }
  void sync_dir(const std::string& dir) override {
    alive();
    log.push_back("sync_dir " + dir);
    base()->sync_dir(dir);
  }
  void remove_file(const std::string& path) override {
    alive();
    log.push_back("remove " + path);
    base()->remove_file(path);
  }
  void create_dirs(const std::string& dir) override {
    alive();
    base()->create_dirs(dir);
  }
  bool file_exists(const std::string& path) override { return base()->file_exists(path); }
  std::vector<char> read_file(const std::string& path) override { return base()->read_file(path); }
  std::vector<std::string> list_dir(const std::string& dir) override {
    return base()->list_dir(dir);
  }
  bool is_dir(const std::string& path) override { return base()->is_dir(path); }
  void remove_dir(const std::string& dir) override {
    alive();
    log.push_back("remove_dir " + dir);
    base()->remove_dir(dir);
  }

 private:
  class File : public WritableFile {
   public:
    File(FaultInjectionFileSystem* fs, std::string path, std::unique_ptr<WritableFile> real)
        : fs_(fs), path_(std::move(path)), real_(std::move(real)) {}
    void append(const char* data, size_t size) override {
      fs_->alive();
      size_t n = size;
      if (fs_->budget_ >= 0 && fs_->bytes_written + static_cast<int64_t>(size) > fs_->budget_) {
        n = static_cast<size_t>(fs_->budget_ - fs_->bytes_written);
      }
      real_->append(data, n);
      fs_->bytes_written += static_cast<int64_t>(n);
      fs_->log.push_back("append " + path_ + " " + std::to_string(n));
      if (n < size) {
        if (fs_->kill_process) ::raise(SIGKILL);
        real_->close();  // the kernel closes a dead process's files; their bytes stay
        fs_->crashed = true;
        throw SimulatedCrash();
      }
    }
    void sync() override {
      fs_->alive();
      fs_->log.push_back("sync " + path_);
      real_->sync();
    }
    void close() override {
      fs_->alive();
      fs_->log.push_back("close " + path_);
      real_->close();
    }

   private:
    FaultInjectionFileSystem* fs_;
    std::string path_;
    std::unique_ptr<WritableFile> real_;
  };

  void alive() const {
    if (crashed) throw SimulatedCrash();
  }
  static FileSystem* base() { return default_file_system(); }

  int64_t budget_;
};

}  // namespace deepspeed::checkpoint::testing

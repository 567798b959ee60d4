#include "monitor/csv_monitor.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "deepspeed/error.h"

namespace deepspeed::monitor {

CsvMonitor::CsvMonitor(const std::string& output_path, const std::string& job_name) {
  // DeepSpeed joins the two as they are: the default output_path "" puts the files in ./<job_name>.
  log_dir_ = (std::filesystem::path(output_path) / job_name).string();
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  DS_CHECK(!ec, "csv_monitor: cannot create the output directory ", log_dir_, ": ", ec.message());
}

CsvMonitor::~CsvMonitor() {
  for (auto& [name, f] : files_) std::fclose(f);
}

std::string CsvMonitor::file_for(const std::string& name) const {
  std::string file = name;
  for (char& c : file)
    if (c == '/' || c == ' ') c = '_';
  return log_dir_ + "/" + file + ".csv";
}

void CsvMonitor::write_events(const std::vector<Event>& events) {
  for (const Event& e : events) {
    auto it = files_.find(e.name);
    if (it == files_.end()) {
      const std::string path = file_for(e.name);
      const bool fresh = !std::filesystem::exists(path);
      std::FILE* f = std::fopen(path.c_str(), "a");
      DS_CHECK(f != nullptr, "csv_monitor: cannot open ", path, ": ", std::strerror(errno));
      if (fresh) {
        const size_t slash = e.name.rfind('/');
        std::fprintf(f, "step,%s\n",
                     slash == std::string::npos ? e.name.c_str() : e.name.c_str() + slash + 1);
      }
      it = files_.emplace(e.name, f).first;
    }
    // %.17g: the value read back is the value written.
    DS_CHECK(std::fprintf(it->second, "%lld,%.17g\n", static_cast<long long>(e.step), e.value) > 0,
             "csv_monitor: cannot write ", file_for(e.name), ": ", std::strerror(errno));
  }
  for (auto& [name, f] : files_)
    DS_CHECK(std::fflush(f) == 0, "csv_monitor: cannot write ", file_for(name), ": ",
             std::strerror(errno));
}

}  // namespace deepspeed::monitor

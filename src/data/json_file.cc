// See json_file.h.
#include "data/json_file.h"

#include <fstream>

#include "deepspeed/error.h"

namespace deepspeed::data {

nlohmann::json read_json_file(const std::string& path, const std::string& missing) {
  std::ifstream in(path);
  DS_CHECK_T(DataError, in.good(), path, ": ", missing);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not JSON (" + e.what() + ")");
  }
}

}  // namespace deepspeed::data

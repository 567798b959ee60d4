// A JSON file the data path reads (tokenizer.json, tokenizer_config.json, a chat template), parsed whole, with the
// DataError naming the file when it cannot be opened or is not JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace deepspeed::data {

// `missing`: the message after the file's name when it cannot be opened.
nlohmann::json read_json_file(const std::string& path, const std::string& missing = "cannot open");

}  // namespace deepspeed::data

// See world_info.h.
#include "launcher/world_info.h"

#include <nlohmann/json.hpp>
#include <set>

#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string base64_encode(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  const size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Accepts the URL-safe and the standard alphabet, with or without padding.
std::string base64_decode(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t padding = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '-' || c == '+')
      v = 62;
    else if (c == '_' || c == '/')
      v = 63;
    else if (c == '=') {
      ++padding;
      continue;
    } else
      throw LaunchError(std::string("--world_info: '") + c + "' is not a base64 character");
    DS_CHECK_T(LaunchError, padding == 0, "--world_info: base64 data after '=' padding");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace

std::string encode_world_info(const ResourcePool& pool) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const HostSlots& h : pool) j[h.host] = h.slots;
  return base64_encode(j.dump());
}

ResourcePool decode_world_info(const std::string& encoded) {
  const std::string text = base64_decode(encoded);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw LaunchError("--world_info is not base64 of a JSON object {\"host\": [slots]}");
  }
  DS_CHECK_T(LaunchError, j.is_object() && !j.empty(),
             "--world_info must encode a non-empty JSON object {\"host\": [slots]}");
  ResourcePool pool;
  for (const auto& [host, slots] : j.items()) {
    DS_CHECK_T(LaunchError, slots.is_array() && !slots.empty(), "--world_info: host '", host,
               "' needs a non-empty list of slots");
    DS_CHECK_T(LaunchError, is_valid_host_name(host), "--world_info: '", host,
               "' is not a valid host name (", kHostNameRule, ")");
    HostSlots h{host, {}};
    std::set<int> seen;
    for (const auto& s : slots) {
      DS_CHECK_T(LaunchError, s.is_number_integer() && s.get<int>() >= 0, "--world_info: host '",
                 host, "' has a slot that is not a non-negative integer: ", s.dump());
      DS_CHECK_T(LaunchError, seen.insert(s.get<int>()).second, "--world_info: host '", host,
                 "' lists slot ", s.get<int>(), " twice");
      h.slots.push_back(s.get<int>());
    }
    pool.push_back(std::move(h));
  }
  return pool;
}

}  // namespace deepspeed::launcher

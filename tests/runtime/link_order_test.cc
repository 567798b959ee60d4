// The C++ standard library's own std::filesystem is what our binaries call. PyPI's LibTorch 2.11 exports copies of
// std::filesystem from libtorch.so that crash (remove_all jumps to a null pointer); with libtorch.so before
// libstdc++.so in a binary's NEEDED list the dynamic linker bound our calls to those copies, and tests that cleaned
// their temporary folders died with SIGSEGV. cmake/DeepSpeedTorch.cmake (ds_torch_link_options) names libstdc++
// first; this checks where the symbol really came from.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

TEST(LinkOrder, StdFilesystemComesFromTheStandardLibrary) {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&);
  const RemoveAll fn = &std::filesystem::remove_all;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(fn), &info), 0) << "dladdr found no object for std::filesystem::remove_all";
  ASSERT_NE(info.dli_fname, nullptr);
  // The standard library's shared object, or its static part linked into this binary (a toolchain whose
  // libstdc++.so adds one), where the address must then be the function's own definition: in an executable that is
  // not position-independent a function's address is its PLT stub, which says nothing about where calls bind.
  const std::string from = info.dli_fname;
  if (from.find("libstdc++") != std::string::npos) return;
  EXPECT_EQ(from.find("libtorch"), std::string::npos) << "std::filesystem::remove_all is bound to " << from;
  EXPECT_EQ(from.find("libc10"), std::string::npos) << "std::filesystem::remove_all is bound to " << from;
  ASSERT_NE(info.dli_sname, nullptr) << "no symbol at std::filesystem::remove_all's address in " << from;
  EXPECT_NE(std::string(info.dli_sname).find("remove_all"), std::string::npos) << info.dli_sname << " in " << from;
  EXPECT_EQ(info.dli_saddr, reinterpret_cast<void*>(fn)) << "a stub, not the definition, in " << from;
}

// When stage 3 hands glibc's freed heap back after each backward (src/zero/stage3/heap_trim.h): by default on glibc,
// never when the user turned it off or manages glibc's allocator through its own variables.
#include "scoped_env.h"
#include "zero/stage3/heap_trim.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

namespace {

#ifdef __GLIBC__
TEST(HeapTrim, OnByDefaultAndOffWhereTheUserSaysSo) {
  ScopedEnv own("DS_HEAP_TRIM", std::nullopt), trim("MALLOC_TRIM_THRESHOLD_", std::nullopt),
      mmap("MALLOC_MMAP_THRESHOLD_", std::nullopt), tunables("GLIBC_TUNABLES", std::nullopt);
  EXPECT_TRUE(deepspeed::zero::per_step_heap_trim_wanted());
  {
    ScopedEnv off("DS_HEAP_TRIM", "0");
    EXPECT_FALSE(deepspeed::zero::per_step_heap_trim_wanted());
  }
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"}) {
    ScopedEnv managed(name, "131072");
    EXPECT_FALSE(deepspeed::zero::per_step_heap_trim_wanted()) << name << " set: the user manages glibc";
    ScopedEnv forced("DS_HEAP_TRIM", "1");
    EXPECT_TRUE(deepspeed::zero::per_step_heap_trim_wanted()) << "DS_HEAP_TRIM=1 asks for it anyway";
  }
}
#endif

}  // namespace

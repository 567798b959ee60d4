# The layering of src/, checked on every quoted #include: a subsystem may include its own headers, the public
# "deepspeed/..." ones, and the private headers of the subsystems listed for it below; nothing else. Public headers
# (include/deepspeed/) include only public ones. Run: cmake -DROOT=<tree> -P check_layering.cmake; exits non-zero
# naming each file:line that breaks the rule.
#
# The table of what each subsystem may include is cmake/Layering.cmake's, which the build enforces too.
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/Layering.cmake")

# The engine's public headers (LibTorch, the Engine, ZeRO, comm, checkpoints): the LibTorch-free subsystems that
# tools link alone (config, launcher, autotuning) may not include them either.
set(engine_headers "deepspeed/deepspeed.h;deepspeed/zero.h;deepspeed/comm.h;deepspeed/checkpoint.h;deepspeed/accelerator.h;deepspeed/data.h;deepspeed/lr_schedules.h")
set(torch_free "config;launcher;autotuning")

if(NOT ROOT)
  message(FATAL_ERROR "check_layering: pass -DROOT=<source tree>")
endif()
set(violations "")
file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/src/*.h" "${ROOT}/src/*.cc" "${ROOT}/include/deepspeed/*.h")
foreach(rel IN LISTS sources)
  if(rel MATCHES "^src/([a-z_]+)/")
    set(sub "${CMAKE_MATCH_1}")
    if(NOT DEFINED allowed_${sub})
      list(APPEND violations "${rel}: subsystem '${sub}' has no row in tests/layering/check_layering.cmake")
      continue()
    endif()
    set(ok "${sub};deepspeed;${allowed_${sub}}")
  elseif(rel MATCHES "^include/deepspeed/")
    set(sub "")
    set(ok "deepspeed")
  else()
    continue()  # src/pch.h and other files at the top of src/
  endif()
  file(STRINGS "${ROOT}/${rel}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line IN LISTS lines)
    if(line MATCHES "#[ \t]*include[ \t]+\"([a-z_]+)/")
      set(target "${CMAKE_MATCH_1}")
      if(NOT target IN_LIST ok)
        list(APPEND violations "${rel}: includes a private header of ${target}/ (${line})")
      endif()
    endif()
    if(sub IN_LIST torch_free AND line MATCHES "#[ \t]*include[ \t]+\"(deepspeed/[a-z_/]+\\.h)\"")
      set(header "${CMAKE_MATCH_1}")
      if(header IN_LIST engine_headers)
        list(APPEND violations "${rel}: ${sub}/ is LibTorch-free and may not include the engine's ${header}")
      endif()
    endif()
  endforeach()
endforeach()
if(violations)
  # One line each (message(STATUS) does not wrap), then a non-zero exit.
  foreach(v IN LISTS violations)
    message(STATUS "${v}")
  endforeach()
  list(LENGTH violations n)
  message(FATAL_ERROR "${n} layering violation(s)")
endif()
list(LENGTH sources n)
message(STATUS "layering ok: ${n} files")

# Issue 53's limit on file size: no source or header under src/ or include/ over MAX lines (600), so a file stays
# readable in one sitting and a subsystem that grows splits by job instead of piling onto one file. Prints
# "file sizes ok" or names every file over the limit with its count.
#   cmake -DROOT=<checkout> [-DMAX=600] -P check_file_sizes.cmake
if(NOT DEFINED MAX)
  set(MAX 600)
endif()
file(GLOB_RECURSE files RELATIVE "${ROOT}" "${ROOT}/src/*.cc" "${ROOT}/src/*.h" "${ROOT}/src/*.cu"
     "${ROOT}/include/*.h")
list(SORT files)
set(over "")
foreach(f IN LISTS files)
  file(READ "${ROOT}/${f}" text)
  # file(STRINGS) skips empty lines; count newlines instead, as wc -l does.
  string(REGEX REPLACE "[^\n]" "" newlines "${text}")
  string(LENGTH "${newlines}" count)
  if(count GREATER MAX)
    string(APPEND over "\n  ${f}: ${count} lines")
  endif()
endforeach()
if(over)
  message(FATAL_ERROR "files over ${MAX} lines (split them by job):${over}")
endif()
list(LENGTH files n)
message("file sizes ok: ${n} files of src/ and include/, none over ${MAX} lines")

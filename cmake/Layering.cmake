# The layering of src/: which subsystems' private headers each subsystem may include. The order of the table is the
# stack, bottom first: arrows point down it. config and launcher know nothing of the engine; zero knows nothing of
# runtime; only pipe builds on the engine itself. Every subsystem may include its own headers and the public ones
# (include/deepspeed/).
#
# Two users: the build (ds_apply_layering below: a subsystem's targets see only these folders, so a wrong-way include
# fails to compile) and tests/layering/check_layering.cmake (names each offending file:line, and checks the public
# headers and the LibTorch-free subsystems too).
set(allowed_config "")
set(allowed_launcher "config")
set(allowed_autotuning "config;launcher")
set(allowed_accelerator "")
set(allowed_comm "accelerator")
set(allowed_ops "accelerator")
set(allowed_swap "accelerator")
set(allowed_monitor "config")
set(allowed_profiling "accelerator;comm;config")
set(allowed_zero "accelerator;comm;config;ops;swap")
set(allowed_moe "accelerator;comm;zero")
set(allowed_tp "comm")
set(allowed_sequence "comm")
set(allowed_checkpoint "accelerator;comm;config;zero")
set(allowed_runtime "accelerator;checkpoint;comm;config;monitor;moe;ops;profiling;sequence;swap;tp;zero")
set(allowed_models "accelerator;checkpoint;comm;config;sequence;tp;zero")
set(allowed_data "checkpoint;config")
set(allowed_inference "")
set(allowed_serving "")
set(allowed_pipe "accelerator;checkpoint;comm;config;monitor;moe;ops;profiling;runtime;sequence;swap;tp;zero")

# ds_apply_layering(<subsystem>): gives every target defined in src/<subsystem>/ a private include root of its own,
# <build>/include_roots/<subsystem>/, holding links to src/<subsystem> and to the subsystems it may use, and nothing
# else. Sources include private headers as "zero/stage.h" from that root (or by a path relative to their own folder,
# which reaches only their own subsystem).
function(ds_apply_layering subsystem)
  if(NOT DEFINED allowed_${subsystem})
    message(FATAL_ERROR "src/${subsystem}/ has no row in cmake/Layering.cmake: say which subsystems it may include")
  endif()
  set(root "${CMAKE_BINARY_DIR}/include_roots/${subsystem}")
  file(MAKE_DIRECTORY "${root}")
  set(wanted ${subsystem} ${allowed_${subsystem}})
  # Links left from an earlier configure with another table go (file(REMOVE) on a link removes the link only).
  file(GLOB existing RELATIVE "${root}" "${root}/*")
  foreach(name IN LISTS existing)
    if(NOT name IN_LIST wanted)
      file(REMOVE "${root}/${name}")
    endif()
  endforeach()
  foreach(name IN LISTS wanted)
    if(NOT EXISTS "${root}/${name}")
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${name}" "${root}/${name}" SYMBOLIC)
    endif()
  endforeach()
  get_property(targets DIRECTORY "${PROJECT_SOURCE_DIR}/src/${subsystem}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    target_include_directories(${target} PRIVATE "${root}")
  endforeach()
endfunction()

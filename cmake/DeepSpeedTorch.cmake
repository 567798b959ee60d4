# Helpers for finding and linking PyPI's LibTorch, used by deepspeed-cpp's build and by find_package(DeepSpeedCpp).

# ds_default_torch_cuda_arch_list(): a CUDA LibTorch's CMake package probes the GPUs of the building machine for
# nvcc's architectures, which fails on a machine without one; unless the user chose (TORCH_CUDA_ARCH_LIST, as a
# variable or in the environment), name them instead: 9.0 is the H100/H200 generation.
macro(ds_default_torch_cuda_arch_list)
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
endmacro()

# ds_pin_caffe2_dir(): TorchConfig finds its Caffe2 package with find_dependency(... PATHS <its own folder>), which
# CMake searches after the system's folders, so a Debian libtorch-dev (1.13) on the machine wins over the LibTorch
# Torch_DIR names. Pin Caffe2_DIR beside Torch_DIR unless the user set it.
macro(ds_pin_caffe2_dir)
  if(Torch_DIR AND NOT Caffe2_DIR AND EXISTS "${Torch_DIR}/../Caffe2")
    get_filename_component(Caffe2_DIR "${Torch_DIR}/../Caffe2" ABSOLUTE)
  endif()
endmacro()

# ds_torch_link_options(<out-var>): link options for binaries that use PyPI's LibTorch.
#
# PyPI's LibTorch finds NCCL, cuDNN, cuBLAS... in site-packages/nvidia/*/lib through its own RUNPATH. The linker
# checks an executable's indirect dependencies too, and without a hint it takes an older NCCL from a CUDA toolkit
# on the machine (missing symbols torch needs). Used by deepspeed-cpp's build and by find_package(DeepSpeedCpp).
# A LibTorch unpacked from pytorch.org's zip has no such folder: no -rpath-link options then.
#
# And libstdc++ first among the libraries the binary needs: PyPI's LibTorch 2.11 exports copies of
# std::filesystem (64 symbols in libtorch.so; 2.15 exports none) that crash when called (a null function pointer
# inside std::filesystem::remove_all). The dynamic linker binds to the first definition in the binary's NEEDED
# order, where libtorch.so comes before libstdc++.so, so every std::filesystem call of ours, in the library and in
# the executables, went to LibTorch's copy. Naming libstdc++ before everything else puts its definitions first.
function(ds_torch_link_options out)
  file(GLOB dirs "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  set(options "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
  foreach(dir IN LISTS dirs)
    get_filename_component(dir "${dir}" ABSOLUTE)
    list(APPEND options "LINKER:-rpath-link,${dir}")
  endforeach()
  set(${out} "${options}" PARENT_SCOPE)
endfunction()

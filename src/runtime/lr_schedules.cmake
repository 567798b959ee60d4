# LR schedules (deepspeed/lr_schedules.h): pure C++17, no LibTorch.
target_sources(ds_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lr_schedules.cc)

# LR schedules (deepspeed/lr_schedules.h) and the factory that builds one from a config's scheduler section: pure
# C++, no LibTorch, so ds_check_config links them alone and checks a scheduler's params with the same code (and
# messages) as initialize().
add_library(ds_lr_schedules OBJECT ${CMAKE_CURRENT_LIST_DIR}/lr_schedules.cc ${CMAKE_CURRENT_LIST_DIR}/scheduler_factory.cc)
target_link_libraries(ds_lr_schedules PUBLIC ds_options)

# LR schedule tests: closed-form values for every schedule and branch, state round-trip, bad params.
set(DS_LR_TEST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/lr_schedules_test.cc)

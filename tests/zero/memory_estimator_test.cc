// placeholder until the estimator lands
#include <gtest/gtest.h>

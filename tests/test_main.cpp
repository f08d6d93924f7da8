// The test binaries' main: subnormals flushed on the main thread first, as the CLI's main does
// (core/float_mode.h), so serial code under test runs the CLI's arithmetic.
#include <gtest/gtest.h>

#include "core/float_mode.h"

int main(int argc, char** argv) {
  ar::flush_denormals();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

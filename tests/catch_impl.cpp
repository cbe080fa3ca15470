// Catch2's implementation, compiled once for both test runners (test_main.cpp, comm_test_main.cpp):
// it is the slowest file of the suite to compile. The runners call run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.h"

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

// The engine suite's runner (Catch2's implementation is in catch_impl.cpp).
#include "catch_session.h"

int main(int argc, char** argv) { return run_catch_session(argc, argv); }

// The trainlab command: a thin main over the library (see bench/tools/cli.cpp).
#include "bench/tools/cli.h"

int main(int argc, char** argv) { return trainlab::cli_main(argc, argv); }

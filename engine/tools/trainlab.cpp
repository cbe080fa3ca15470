// The trainlab command: a thin main over the library (see engine/cli.cpp).
#include "engine/tools/cli.h"

int main(int argc, char** argv) { return trainlab::cli_main(argc, argv); }

// The trainlab command: a thin main over the library (apps/trainlab/cli.cpp).
#include "apps/trainlab/cli.h"

int main(int argc, char** argv) { return trainlab::cli_main(argc, argv); }

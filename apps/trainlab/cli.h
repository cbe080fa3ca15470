// The `trainlab` command line (built on CLI11): `train`, `backends`, `version`.
// Bad input of any kind (unknown flag or key, wrong type, out-of-range value, missing file,
// unknown backend, unusable checkpoint) prints one line, "trainlab: error: ...", and exits 2.
#pragma once

namespace trainlab {

int cli_main(int argc, char** argv);

}  // namespace trainlab

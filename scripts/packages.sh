# The Debian packages trainlab builds and runs with: the one list, sourced by scripts/install-deps.sh
# (apt-get install on a Debian machine) and scripts/fetch-device-debs.sh (apt-get download, for a GPU
# machine with no apt: scripts/device-check.sh unpacks them with dpkg -x, which resolves no
# dependency, so the runtime libraries are listed too). tests/check_packages.py keeps them honest:
# every package of the build list is fetched, with every library it depends on.

# What CMakeLists.txt finds: each -dev package, for both lists.
TRAINLAB_BUILD_PACKAGES=(
  pkg-config
  libeigen3-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers
  libopenmpi-dev openmpi-bin
  catch2 libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libhwloc-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev
)

# What install-deps.sh adds on a Debian machine: the compilers and build tools (a GPU machine has its
# own, with nvcc), hwloc's tools, the PyTorch peer (the GPU machine's own PyTorch is the peer there),
# qemu-user (tests/apps/avx2_cpu_test.sh runs the build on an emulated AVX2 CPU), and a real data set:
# dataset-fashion-mnist (Fashion-MNIST's IDX files under /usr/share/datasets/fashion-mnist/, 30 MB;
# `trainlab make-dataset --from idx:...` imports it, `make fashion` trains on it).
# python3-torch: PyTorch 1.13 under /usr/bin/python3, the peer for side-by-side benchmarks and the
# gradient comparison test; libgoogle-perftools4 (tcmalloc) and libjemalloc2, the allocators PyTorch's
# CPU performance guide names, which the peers measure as variants (bench/peers/peer_malloc.py).
# libopenblas0-pthread: the BLAS Debian's PyTorch calls for nn.Linear and torch.mm (its build's
# BLAS_INFO is "generic": whatever libblas.so.3 is). Without it that is netlib's reference BLAS, about
# 5 GFLOP/s here, and the GPT peer trained at 1.1k tokens/s instead of 16k: OpenBLAS (update-
# alternatives picks it, priority 100 over netlib's 10) is the strongest the peer can have.
# fortunes: about 2 MB of English text under /usr/share/games/fortunes, the GPT's default corpus
# (`trainlab make-dataset --from text:/usr/share/games/fortunes`, `make gpt`).
# ocl-icd-opencl-dev and opencl-headers (above): Debian's dnnl CMake config
# requires OpenCL (its GPU runtime).
TRAINLAB_HOST_PACKAGES=(
  build-essential cmake ninja-build
  libbenchmark-dev hwloc
  python3-torch python3-numpy libgoogle-perftools4 libjemalloc2
  qemu-user
  libopenblas0-pthread
  dataset-fashion-mnist fortunes
)

# What fetch-device-debs.sh adds for a bare machine: the libraries the build packages depend on (dpkg
# -x does not follow Depends), the packages behind names that update-alternatives would otherwise
# make (pkg-config's pkgconf), and Open MPI's own runtime (its transports and their libraries).
# Not listed: what every machine with a C++ toolchain has (TRAINLAB_DEVICE_ASSUMED below); zlib1g is
# listed although it is everywhere, because zlib1g-dev's libz.so points at this version's file.
TRAINLAB_DEVICE_RUNTIME_PACKAGES=(
  pkgconf pkgconf-bin libpkgconf3
  libdnnl2 ocl-icd-libopencl1 opencl-c-headers opencl-clhpp-headers
  libyaml-cpp0.7 libfmt9
  libturbojpeg0 libpng16-16 zlib1g
  libhwloc15 libnuma1
  libopenmpi3 openmpi-common libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2
  libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm-infinipath1 libmunge2
)

# Dependencies of the fetched packages that fetch-device-debs.sh leaves out, and why.
# Present on every machine with a C++ toolchain (the GPU machine builds with its own g++ and nvcc):
TRAINLAB_DEVICE_ASSUMED=(libc6 libgcc-s1 libstdc++6 libgomp1 libatomic1 libudev1 libuuid1)
# Not needed by this build: what a -dev package wants for features trainlab does not use (Open MPI's
# Fortran bindings and HTML docs); Open MPI's optional plugins for InfiniBand hardware and hwloc's for
# PCI and XML discovery, which shared memory on one machine does not use; what only a package's
# install scripts run (adduser), and mpirun's remote launch over ssh (one machine needs none).
TRAINLAB_DEVICE_NOT_NEEDED=(gfortran-12 libjs-jquery libjs-jquery-ui ibverbs-providers libhwloc-plugins adduser
                            openssh-client)

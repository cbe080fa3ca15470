# cuDNN and NCCL for a CUDA build, found where they are on the machines trainlab meets:
#   1. <NAME>_ROOT (CUDNN_ROOT, NCCL_ROOT), the CUDA toolkit's folders, the system's;
#   2. the Python wheels a pip-installed PyTorch brings (site-packages/nvidia/cudnn, nvidia/nccl) of
#      the python3 on PATH. A wheel ships only the versioned library (libcudnn.so.9, libnccl.so.2):
#      the build links through a folder of symlinks (<build>/gpu-libs), and writes the wheels' lib
#      folders to <build>/gpu-library-dirs.txt for LD_LIBRARY_PATH (cuDNN loads its engine libraries
#      at run time, by name).
# Where each was found is printed at configure time.
#
#   trainlab_find_gpu_library(OUT NAME cudnn HEADER cudnn.h ROOT CUDNN_ROOT WHEEL cudnn SOVERSION 9)
# sets OUT_LIBRARY, OUT_INCLUDE_DIR and OUT_FOUND_VIA in the caller's scope, or stops with an error
# naming every place it looked.

function(trainlab_find_gpu_library out)
  cmake_parse_arguments(ARG "" "NAME;HEADER;ROOT;WHEEL;SOVERSION;WHAT" "" ${ARGN})
  set(root "${${ARG_ROOT}}")
  if(NOT root AND DEFINED ENV{${ARG_ROOT}})
    set(root "$ENV{${ARG_ROOT}}")
  endif()
  find_path(include_dir ${ARG_HEADER} NO_CACHE
            HINTS ${root}/include ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  find_library(library ${ARG_NAME} NO_CACHE
               HINTS ${root}/lib ${root}/lib64 ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  set(via "${ARG_ROOT}, the CUDA toolkit or the system")
  if(NOT include_dir OR NOT library)
    # The wheels of the python3 on PATH (the GPU machine's PyTorch), in every folder on its path.
    find_program(trainlab_python NAMES python3 NO_CACHE)
    set(searched "")
    if(trainlab_python)
      execute_process(COMMAND ${trainlab_python} -c
                              "import site, sys; print(';'.join(sys.path + site.getsitepackages() + [site.getusersitepackages()]))"
                      OUTPUT_VARIABLE python_path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      foreach(dir IN LISTS python_path)
        set(wheel "${dir}/nvidia/${ARG_WHEEL}")
        list(APPEND searched "${wheel}")
        set(versioned "${wheel}/lib/lib${ARG_NAME}.so.${ARG_SOVERSION}")
        if(EXISTS "${wheel}/include/${ARG_HEADER}" AND EXISTS "${versioned}")
          set(links "${PROJECT_BINARY_DIR}/gpu-libs")
          file(MAKE_DIRECTORY "${links}")
          file(CREATE_LINK "${versioned}" "${links}/lib${ARG_NAME}.so" SYMBOLIC)
          file(CREATE_LINK "${versioned}" "${links}/lib${ARG_NAME}.so.${ARG_SOVERSION}" SYMBOLIC)
          set(include_dir "${wheel}/include")
          set(library "${links}/lib${ARG_NAME}.so")
          set(via "the Python wheel ${wheel} (linked through ${links})")
          file(APPEND "${PROJECT_BINARY_DIR}/gpu-library-dirs.txt" "${wheel}/lib\n")
          break()
        endif()
      endforeach()
    endif()
    if(NOT include_dir OR NOT library)
      message(FATAL_ERROR "TRAINLAB_CUDA=ON but ${ARG_WHAT} was not found (${ARG_HEADER}: ${include_dir}, "
                          "lib${ARG_NAME}: ${library}); looked in ${ARG_ROOT} ('${root}'), the CUDA toolkit "
                          "(${CUDAToolkit_LIBRARY_DIR}), the system, and the Python wheels ${searched}; set "
                          "${ARG_ROOT} to its prefix")
    endif()
  endif()
  message(STATUS "trainlab: ${ARG_WHAT} ${library} (headers ${include_dir}; found through ${via})")
  set(${out}_LIBRARY "${library}" PARENT_SCOPE)
  set(${out}_INCLUDE_DIR "${include_dir}" PARENT_SCOPE)
  set(${out}_FOUND_VIA "${via}" PARENT_SCOPE)
endfunction()

# cuda-archs.cmake — the CUDA architectures the CUDA plugin is built for,
# one default for the top-level build and for a standalone build of
# backends/cuda against an installed SDK. CMake CUDA_ARCHITECTURES syntax:
# "NN-real" is SASS only, "NN-virtual" PTX only, plain "NN" both. The
# default is SASS for Ampere (80, 86), Ada (89) and Hopper (90) plus PTX of
# 90, which the driver compiles for newer chips; probe refuses a GPU older
# than 8.0 with a reason (arch.c). One architecture (e.g. 90) builds about
# four times faster.
set(MINFER_CUDA_ARCHS_DEFAULT "80-real;86-real;89-real;90")
set(MINFER_CUDA_ARCHS "${MINFER_CUDA_ARCHS_DEFAULT}" CACHE STRING
    "CUDA architectures of the CUDA plugin (CMake CUDA_ARCHITECTURES syntax)")

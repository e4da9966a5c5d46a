// SKIM_HOST_DEVICE: a helper that runs on the host and in CUDA kernels (argument structs shared
// by a kernel and its CPU reference).
#pragma once

#if defined(__CUDACC__)
#define SKIM_HOST_DEVICE __host__ __device__
#else
#define SKIM_HOST_DEVICE
#endif

"""Test stand-ins for NVIDIA's libraries, so the CUDA runtime runs and is tested on
machines without a GPU (`LAZYARRAY_FAKE_CUDA=1`): the driver and cuBLAS over host memory,
cuFFT, cuSOLVER and NCCL over it, and two ways of running a GPU program's kernels on the
host (their CPU twins, or their own code thread by thread)."""

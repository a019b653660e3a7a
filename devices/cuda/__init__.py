"""The CUDA runtime: the device (cuda.py), the driver, memory, graphs, kernel images,
cuBLAS, cuFFT, cuSOLVER, NCCL and the GPU timer."""

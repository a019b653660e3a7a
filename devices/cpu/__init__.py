"""The CPU runtime: the compiled CPU device (cpu.py), the native worker pool and its GEMM
tiles, the native program runner, host memory, SciPy's LAPACK, and ahead-of-time
libraries."""

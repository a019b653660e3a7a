"""Skip marks of the tests that assemble PTX: no GPU is needed, only CUDA's `ptxas` and
libdevice (the GPU math library)."""
import pytest

from lazyarray.compiler.codegen import gpu_math, ptxas

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None,
                                 reason="ptxas not found on PATH or under /usr/local/cuda*/bin")
needs_libdevice = pytest.mark.skipif(gpu_math.libdevice_path() is None,
                                     reason="libdevice.10.bc not found (no CUDA toolkit)")

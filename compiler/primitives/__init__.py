"""Every primitive, one stanza each. Importing this package fills the registry."""
from . import elementwise, linalg, reduction, sorting, structural  # noqa: F401
from . import collectives, convolution, conv_direct, windows  # noqa: F401
from . import complex_parts, decompositions, fft  # noqa: F401
from . import control, portable_math, random_bits  # noqa: F401

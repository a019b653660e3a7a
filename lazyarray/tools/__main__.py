"""`python -m lazyarray.tools FILE ...` is `python -m lazyarray.tools.run_hlo FILE ...`."""
import sys

from .run_hlo import main

sys.exit(main())

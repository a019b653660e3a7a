"""Command-line tools: `python -m lazyarray.tools.run_hlo FILE` runs a dumped HLO module."""

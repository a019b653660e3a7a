"""CUDA graph bookkeeping for one executable: when to capture, when to replay.

A graph records the launches of one run with the device pointers they were given, so it
may be replayed only when every pointer is the same again. The key of a run is where its
inputs are (the parameters', the constants' and the scalar block's pointers); a graph
kept under that key also records where its outputs and temporaries were, and a replay
first claims exactly those blocks from the allocator (they are free when the results of
the run before last are gone, as in a training loop: a state updated outside an
elementwise loop, such as a bias inside its gradient's reduction, BatchNorm's running
statistics or the dropout key, trades buffers with its update every other step, so a
step's layouts alternate and a graph is kept for each). From its second run on, the
blocks an executable writes come from and return to its own pool in the allocator
(cuda_memory.py), so that another program run between two steps (an evaluation forward)
cannot hold them when the graph wants them back; and every run, replayed or not,
records where its results went, so that a run that is not replayed places its results
where the run before last put them. A result whose block the caller still holds when
its graph wants it back (a loss kept in a list) is from then on written into a block the
graph keeps and copied out after each launch. A key seen `CAPTURE_AFTER` times without
a usable graph is captured (a layout seen once may never come back: capturing it would
be wasted); a run whose graph cannot be used launches its kernels one by one. A few
graphs are kept per executable (`MAX_GRAPHS`, the oldest dropped first).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional

CAPTURE_AFTER = 2
MAX_GRAPHS = 8


class GraphCache:
    """Graphs of one executable keyed by their pointer layout (see module doc)."""

    def __init__(self, destroy: Callable[[Any], None]) -> None:
        self._destroy = destroy
        self._graphs: "OrderedDict[tuple, Any]" = OrderedDict()
        self._seen: dict = {}
        self.captures = 0
        self.replays = 0
        self.fallbacks = 0        # runs launched kernel by kernel (layout not captured yet)
        self.evictions = 0

    def lookup(self, key: tuple) -> Optional[Any]:
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            self.replays += 1
        return graph

    def wants_capture(self, key: tuple) -> bool:
        """Count a run with layout `key` (no graph yet); True when it should be captured."""
        seen = self._seen.get(key, 0) + 1
        if len(self._seen) > 8 * MAX_GRAPHS:       # layouts that never come back: forget
            self._seen.clear()
        self._seen[key] = seen
        if seen < CAPTURE_AFTER:
            self.fallbacks += 1
            return False
        return True

    def add(self, key: tuple, graph: Any) -> None:
        """Keep `graph` (anything holding a graph handle at [0]) under `key`, replacing
        the one there (a recapture)."""
        self.captures += 1
        self._seen.pop(key, None)
        old = self._graphs.pop(key, None)
        if old is not None:
            self.evictions += 1
            self._destroy(old)
        self._graphs[key] = graph
        while len(self._graphs) > MAX_GRAPHS:
            _, old = self._graphs.popitem(last=False)
            self.evictions += 1
            self._destroy(old)

    def clear(self) -> None:
        for g in self._graphs.values():
            self._destroy(g)
        self._graphs.clear()
        self._seen.clear()

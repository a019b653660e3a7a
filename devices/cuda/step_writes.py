"""The module values each kind of CUDA program step writes: the buffers to allocate before
a run, by the step-by-step executor (cuda.py) and the loop graphs (cuda_loops.py) alike."""
from __future__ import annotations

from ...compiler.program import ConditionalStep, LaunchStep, LibraryStep, Step, WhileStep


def written(step: Step) -> list:
    """The module values a step writes."""
    return _WRITES[type(step)](step)


def _control_writes(step: Step) -> list:
    return [p for p, _ in step.outputs]


# step class -> the values it writes
_WRITES = {LaunchStep: lambda s: s.args, LibraryStep: lambda s: [s.pos],
           WhileStep: _control_writes, ConditionalStep: _control_writes}

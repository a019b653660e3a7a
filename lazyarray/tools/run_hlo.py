"""Run a dumped HLO module on its own, as XLA's run_hlo_module does.

    python -m lazyarray.tools.run_hlo module.hlo [--inputs in.npz] [--device cpu]
                                                 [--save out.npz] [--seed N]

The module text is what LAZYARRAY_DUMP writes (or `la.debug.ir(t, "hlo")` returns). A
runtime scalar takes the value its `// scalar number=N value=V` comment line recorded.
The other inputs come from an .npz (--inputs, or else the dump's own `<name>.inputs.npz`
beside the file, for `<name>.hlo` and `<name>.optimized.hlo` alike), keyed p0, p1, ... by parameter number, or else taken in the file's
order; without one they are random (seeded). A dump replays exactly. Outputs are printed (type and a summary of the values) or
saved to an .npz keyed o0, o1, ... (bfloat16 arrays are stored as their raw 2-byte values,
as NumPy does for ml_dtypes types).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.hlo.module import Module
from ..compiler.hlo.parser import parse_module
from ..compiler.hlo.printer import type_text
from ..compiler.hlo.replay import scalar_values
from ..compiler.hlo.verifier import verify


def parameter_types(module: Module) -> list:
    """(shape, dtype) of each parameter, by parameter number."""
    return [(module.instructions[i].shape, module.instructions[i].dtype)
            for i in module.parameters]


def random_inputs(module: Module, seed: int = 0) -> list:
    """Floats from a normal distribution; integers in 0..9 (valid as small indices and
    shift amounts); bools at random."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in parameter_types(module):
        if dtype is D.bool_:
            out.append(rng.random(shape) < 0.5)
        elif dtype.is_float:
            out.append(rng.normal(size=shape).astype(dtype.np))
        else:
            out.append(rng.integers(0, 10, shape).astype(dtype.np))
    return out


def load_inputs(module: Module, path: str, known: Optional[dict] = None) -> list:
    """Arrays from an .npz: keys p0, p1, ... when present, else in the file's order;
    parameters in `known` (number -> value: the recorded scalars) need no array."""
    known = known or {}
    types = parameter_types(module)
    with np.load(path, allow_pickle=False) as data:
        keys = list(data.keys())
        open_numbers = [i for i in range(len(types)) if i not in known]
        wanted = [f"p{i}" for i in open_numbers]
        if not all(k in keys for k in wanted):
            if len(keys) != len(open_numbers):
                raise ValueError(f"run_hlo: {path} holds {len(keys)} arrays ({', '.join(keys)}) "
                                 f"but the module has {len(open_numbers)} parameters without a "
                                 f"recorded value; name them p0..p{len(types) - 1} or give "
                                 f"exactly one per parameter")
            wanted = keys
        given = {n: _as_parameter(data[k], k, n, *types[n]) for n, k in zip(open_numbers, wanted)}
    return [given[n] if n in given else _scalar_input(known[n], n, *types[n])
            for n in range(len(types))]


def _scalar_input(value: Any, number: int, shape: tuple, dtype: D.DType) -> np.ndarray:
    if tuple(shape) != ():
        raise ValueError(f"run_hlo: a scalar value is recorded for parameter {number}, "
                         f"which is {type_text(shape, dtype)}")
    return np.asarray(value, dtype=dtype.np)


def replay_inputs(module: Module, text: str, path: str, inputs: Optional[str] = None,
                  seed: int = 0) -> tuple:
    """(inputs, where they came from) for the module read from `path`: recorded scalars,
    then --inputs or the dump's own .npz, else random values (see the module docstring)."""
    known = scalar_values(text)
    if inputs is None:
        inputs = dumped_inputs(path)
    if inputs is not None:
        return load_inputs(module, inputs, known), inputs
    out = random_inputs(module, seed)
    types = parameter_types(module)
    for n, v in known.items():
        if n < len(out):
            out[n] = _scalar_input(v, n, *types[n])
    return out, f"random (seed {seed})" + (", recorded scalars" if known else "")


def dumped_inputs(path: str) -> Optional[str]:
    """The dump's own `<name>.inputs.npz` beside `<name>.hlo` or `<name>.optimized.hlo`
    (their parameters are the same, by number), or None."""
    for suffix in (".optimized.hlo", ".hlo"):
        if path.endswith(suffix):
            found = path[:-len(suffix)] + ".inputs.npz"
            return found if os.path.exists(found) else None
    return None


def _as_parameter(a: np.ndarray, key: str, number: int, shape: tuple, dtype: D.DType) -> np.ndarray:
    want = type_text(shape, dtype)
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"run_hlo: input {key!r} has shape {tuple(a.shape)} but parameter "
                         f"{number} is {want}")
    if a.dtype == dtype.np:
        return a
    if a.dtype.kind == "V" and a.dtype.itemsize == dtype.itemsize:
        return a.view(dtype.np)        # bfloat16 comes back from .npz as raw bytes
    if np.can_cast(a.dtype, dtype.np, casting="same_kind"):
        return a.astype(dtype.np)
    raise ValueError(f"run_hlo: input {key!r} has dtype {a.dtype} but parameter {number} is "
                     f"{want}, and {a.dtype} does not cast to it safely")


def run(module: Module, inputs: list, device: Optional[str] = None) -> list:
    """Compile the module on a device (by name, as `la.device` takes it) and run it on host
    arrays; return the outputs as host arrays."""
    from .. import runtime   # importing the package has registered the devices
    dev = runtime.get_device(device).device
    exe = dev.compile(module)
    outs = exe.run([dev.put(np.ascontiguousarray(a)) for a in inputs])
    return [np.asarray(dev.get(b)) for b in outs]


def summary(a: np.ndarray) -> str:
    if a.size == 0:
        return "(empty)"
    if a.dtype == np.bool_:
        return f"true={int(a.sum())}/{a.size}"
    wide = a.astype(np.float64)
    finite = wide[np.isfinite(wide)]
    stats = (f"min={finite.min():.6g} max={finite.max():.6g} mean={finite.mean():.6g}"
             if finite.size else "no finite values")
    bad = a.size - finite.size
    return stats + (f" non-finite={bad}" if bad else "")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lazyarray.tools.run_hlo",
                                description="Run a dumped HLO module on its own.")
    p.add_argument("file", help="HLO text, as LAZYARRAY_DUMP writes it")
    p.add_argument("--inputs", help=".npz of inputs, keyed p0, p1, ... or in order")
    p.add_argument("--device", default=None,
                   help="device name: interpreter, cpu, cuda (default: the default device)")
    p.add_argument("--save", help="write the outputs to this .npz (keys o0, o1, ...)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    args = p.parse_args(argv)
    try:
        with open(args.file) as f:
            text = f.read()
        module = parse_module(text)
        verify(module)
        inputs, source = replay_inputs(module, text, args.file, args.inputs, args.seed)
        outputs = run(module, inputs, args.device)
    except (OSError, ValueError, TypeError, IndexError) as e:
        msg = str(e)
        print(msg if msg.startswith("run_hlo") else f"run_hlo: {msg}", file=sys.stderr)
        return 1
    print(f"module {module.name}: {len(module.instructions)} instructions, "
          f"{len(inputs)} parameters, {len(outputs)} outputs; inputs: {source}")
    if args.save:
        np.savez(args.save, **{f"o{i}": o for i, o in enumerate(outputs)})
        print(f"saved {len(outputs)} outputs to {args.save}")
    for i, o in enumerate(outputs):
        ins = module.instructions[module.outputs[i]]
        print(f"output {i}: {type_text(ins.shape, ins.dtype)} {summary(o)}")
        if not args.save:
            print("  " + np.array2string(o, threshold=20, edgeitems=3).replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())

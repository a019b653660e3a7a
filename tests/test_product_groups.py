"""Independent matrix products side by side in a program's native job
(devices/cpu/product_groups.py): a product moves up next to an earlier one only when no step
in between computes its operands, its result gets memory of its own when its slot holds
another value meanwhile, and a training step run so gives the interpreter's parameters."""
from __future__ import annotations

import types

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.program import LibraryStep, LoopStep
from lazyarray.devices.cpu import native_gemm, product_groups, run_plan
from lazyarray.devices.cpu import native_pool as NP

from native_training import made_programs, train_mlp


def _exe(steps: list, slot_of: dict = None, outputs: list = (), params: list = (0, 1, 2)):
    """A stand-in for a CPUExecutable: what the planner reads of one."""
    return types.SimpleNamespace(steps=steps, slot_of=dict(slot_of or {}), outputs=list(outputs),
                                 params=[(p, k) for k, p in enumerate(params)],
                                 _const_arrays={}, _param_slots=set(), _aliases=[])


WORK: dict = {}      # id(product step) -> its work, for the planner's stand-in estimate
UNIT = -(-product_groups.SIDE_BY_SIDE_WORK // 100)   # work 100: the least placed side by side


def _product(a: int, b: int, out: int, work: int = 100) -> LibraryStep:
    step = LibraryStep(call="gemm", op="dot_general", operands=[a, b], pos=out)
    WORK[id(step)] = work * UNIT
    return step


def _loop(*args: int) -> LoopStep:
    return LoopStep(fn="f", args=list(args), extent=1, work=1)


def _plan(exe, threads: int = 2) -> product_groups.Plan:
    return product_groups.plan(exe, threads, run_plan.used,
                               lambda s: WORK.get(id(s)) if isinstance(s, LibraryStep) else None)


def test_an_independent_product_moves_next_to_the_earlier_one() -> None:
    p, loop, q = _product(0, 1, 10), _loop(10, 11), _product(0, 2, 12)
    plan = _plan(_exe([p, loop, q], {10: 5, 11: 6, 12: 7}))
    assert plan.order == [p, q, loop]
    assert plan.go_on == {id(p)} and plan.own == set()
    assert plan.tiles == {id(p): 1, id(q): 1}          # equal work: each whole on a thread


def test_products_too_small_to_split_stay_apart() -> None:
    """Each runs whole on one thread anyway: side by side, their job would wake the
    workers for nothing (a decoding step's small products)."""
    p, loop, q = _product(0, 1, 10, work=99), _loop(10, 11), _product(0, 2, 12, work=99)
    plan = _plan(_exe([p, loop, q], {10: 5, 11: 6, 12: 7}))
    assert plan.order == [p, loop, q] and not plan.go_on and not plan.tiles


def test_a_product_reading_what_a_step_between_computes_stays() -> None:
    p, loop, q = _product(0, 1, 10), _loop(10, 11), _product(11, 2, 12)
    plan = _plan(_exe([p, loop, q]))
    assert plan.order == [p, loop, q] and not plan.go_on and not plan.tiles


def test_a_result_whose_slot_is_in_use_in_between_gets_its_own_memory() -> None:
    # q's result reuses the slot of 11, which the loop writes between p and q
    p, loop, r, q = _product(0, 1, 10), _loop(10, 11), _loop(11, 13), _product(0, 2, 12)
    plan = _plan(_exe([p, loop, r, q], {10: 5, 11: 6, 12: 6, 13: 7}))
    assert plan.order == [p, q, loop, r] and plan.own == {12}
    # ... unless it is an output of the program: then it stays where it was
    plan = _plan(_exe([p, loop, r, q], {10: 5, 11: 6, 12: 6, 13: 7}, outputs=[12, 13]))
    assert plan.order == [p, loop, r, q] and not plan.go_on


def test_a_result_sharing_a_slot_with_a_product_beside_it_gets_its_own_memory() -> None:
    # q's result reuses the slot of p's operand 3 (dead after p): side by side, q would
    # write it while p still reads it
    p, loop, q = _product(3, 1, 10), _loop(10, 11), _product(0, 2, 12)
    plan = _plan(_exe([p, loop, q], {3: 4, 10: 5, 11: 6, 12: 4}, params=(0, 1, 2, 3)))
    assert plan.order == [p, q, loop] and plan.own == {12}


def test_unequal_products_run_split_and_groups_hold_one_product_a_thread() -> None:
    p, loop, q = _product(0, 1, 10, work=1000), _loop(10, 11), _product(0, 2, 12, work=100)
    plan = _plan(_exe([p, loop, q]))
    assert plan.go_on == {id(p)} and plan.tiles == {id(p): 2, id(q): 2}
    r = _product(1, 2, 13)
    plan = _plan(_exe([_product(0, 1, 10), _loop(10, 11), _product(0, 2, 12), r]))
    assert len(plan.go_on) == 1 and id(r) not in plan.tiles       # 2 threads: pairs
    plan = _plan(_exe([p, loop, q]), threads=1)
    assert plan.order == [p, loop, q] and not plan.go_on


def test_a_product_joins_the_group_where_each_runs_whole() -> None:
    light, a, heavy, b, q = (_product(0, 1, 10, work=100), _loop(10, 11),
                             _product(11, 2, 12, work=1000), _loop(12, 13), _product(1, 2, 14))
    plan = _plan(_exe([light, a, heavy, b, q]))
    # q (work 100) may join `heavy` (the latest group) or `light`: beside `light` each
    # runs whole on a thread
    assert plan.order == [light, q, a, heavy, b] and plan.go_on == {id(light)}
    assert plan.tiles == {id(light): 1, id(q): 1}


# ---- end to end: a training step ------------------------------------------------------

@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
# (the small one's products above linalg.SMALL_PRODUCT, which are generated reductions)
@pytest.mark.parametrize("sizes, batch", [((784, 512, 512, 10), 256), ((96, 48, 48, 3), 17)])
def test_a_training_step_with_products_side_by_side_matches_the_interpreter(
        sizes: tuple, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    made = made_programs(monkeypatch)
    with la.config.override(device="cpu", num_threads=2):
        got = train_mlp(sizes, batch, 3)
    with la.config.override(device="interpreter"):
        want = train_mlp(sizes, batch, 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    grouped = [prog for prog in made if prog.plan.go_on]
    if sizes[0] < 100:      # products too small to split stay apart (SIDE_BY_SIDE_WORK)
        assert not grouped
        return
    assert grouped, "no program ran two products side by side"
    words = [job._tasks.reshape(-1, NP.IR.TASK_WORDS)[:, NP.IR.TASK_GO_ON]
             for prog in grouped for job, _, _ in prog.segments]
    # (steps free of the tasks before them go on too: tests/test_step_barriers.py)
    assert sum(int(w.sum()) for w in words) >= sum(len(p.plan.go_on) for p in grouped)
    if sizes[0] == 784:     # this step's buffer plan reuses the moved weight gradient's slot
        assert any(prog.plan.own for prog in grouped)
        # its 10-wide layer's products: the gradients (256x10 @ 10x512, 10x256 @ 256x512)
        # direct, the forward 256x512 @ (10x512).T dot products of rows
        fns = [int(t[NP.IR.TASK_FN]) for prog in grouped for job, _, _ in prog.segments
               for t in job._tasks.reshape(-1, NP.IR.TASK_WORDS)]
        tile = native_gemm.tile_function
        assert sum(fn == tile(np.dtype(np.float32), "direct") for fn in fns) == 2
        assert sum(fn == tile(np.dtype(np.float32), "dots") for fn in fns) == 1


# ---- two products as tasks of one job, side by side --------------------------------------

def _operand(rng, shape: tuple, dtype, transposed: bool) -> np.ndarray:
    x = rng.standard_normal(shape).astype(dtype)
    return np.ascontiguousarray(x.T).T if transposed else x      # BLAS reads the view as is


def _product_task(a: np.ndarray, b: np.ndarray, out: np.ndarray, tiles: int, base: int):
    fn, desc, ranges = native_gemm.task(out.dtype, a.shape[0], b.shape[1], a.shape[1],
                                        native_gemm._operand(a)[1:], native_gemm._operand(b)[1:],
                                        tiles)
    return (fn, [base, base + 1, base + 2, base + 3], [], [], ranges), desc


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("tiles", ["whole", "split"])
def test_two_products_side_by_side_match_numpy(dtype, threads: int, tiles: str) -> None:
    """Odd shapes (1 to 37 rows, columns that no tile count divides, a split that would
    leave an empty tile), every transpose: each product of a pair, its tiles taken by
    any thread with no barrier between the two, equals NumPy's."""
    rng = np.random.default_rng(threads)
    shapes = [((1, 7, 5), (37, 1, 3)), ((11, 40, 7), (5, 3, 300)), ((3, 1, 2), (64, 33, 29))]
    pool = NP.NativePool(threads)
    try:
        for (m1, k1, n1), (m2, k2, n2) in shapes:
            for ta, tb in [(False, False), (True, False), (False, True), (True, True)]:
                a1, b1 = _operand(rng, (m1, k1), dtype, ta), _operand(rng, (k1, n1), dtype, tb)
                a2, b2 = _operand(rng, (m2, k2), dtype, tb), _operand(rng, (k2, n2), dtype, ta)
                o1, o2 = np.full((m1, n1), np.nan, dtype), np.full((m2, n2), np.nan, dtype)
                t = 1 if tiles == "whole" else threads
                task1, d1 = _product_task(a1, b1, o1, t, 0)
                task2, d2 = _product_task(a2, b2, o2, t, 4)
                job = NP.Job([task1, task2], 8, go_on=[0])
                job.table[:] = [NP.address(x) for x in (a1, b1, o1, d1, a2, b2, o2, d2)]
                pool.run(job)
                tol = 1e-4 if dtype == np.float32 else 1e-12
                for a, b, o in ((a1, b1, o1), (a2, b2, o2)):
                    want = a.astype(np.float64) @ b.astype(np.float64)
                    np.testing.assert_allclose(o, want, rtol=tol, atol=tol)
    finally:
        pool.close()


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_a_product_too_small_to_split_runs_on_the_calling_thread() -> None:
    a, b = np.ones((8, 8), np.float32), np.full((8, 8), 2.0, np.float32)
    out = np.empty((8, 8), np.float32)
    pool = NP.get_pool(2)
    shared = pool.runs_shared
    for _ in range(5):
        assert native_gemm.matmul(a, b, out, 2)
    assert pool.runs_shared == shared                # no worker was asked
    np.testing.assert_array_equal(out, np.full((8, 8), 16.0))


# ---- small products computed directly (no BLAS) -------------------------------------------

@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_direct_products_match_numpy(dtype, trans_a: bool, threads: int) -> None:
    """Every row block (1 to 13 rows: blocks of 6 and each remainder) and column block
    (wide blocks, one vector, single columns: 32 to 100 columns), short and long inner
    dimensions, tiles that split C unevenly or would leave one empty."""
    rng = np.random.default_rng(threads + 7 * trans_a)
    direct_fn = native_gemm.tile_function(np.dtype(dtype), "direct")
    pool = NP.NativePool(threads)
    shapes = [(m, n, k) for m in (1, 2, 5, 6, 7, 11, 12) for n, k in ((32, 1), (43, 300), (100, 9))]
    shapes += [(37, 77, 16), (13, 513, 3), (256, 512, 10), (10, 512, 256)]
    # inner dimensions at and around the chunks B is read in (the first chunk starts C,
    # the others add to it, the last may be short)
    chunk = native_gemm.IR.SMALL_K_CHUNK
    shapes += [(7, 40, chunk), (7, 40, chunk + 1), (3, 33, 2 * chunk - 1), (11, 48, 3 * chunk + 5)]
    try:
        for m, n, k in shapes:
            assert native_gemm.direct(m, n, k, native_gemm.IR.CBLAS_NO_TRANS), (m, n, k)
            a = _operand(rng, (m, k), dtype, trans_a)
            b = rng.standard_normal((k, n)).astype(dtype)
            out = np.full((m, n), np.nan, dtype)
            task, desc = _product_task(a, b, out, threads, 0)
            assert task[0] == direct_fn                   # the direct path, not BLAS
            job = NP.Job([task], 4)
            job.table[:] = [NP.address(x) for x in (a, b, out, desc)]
            pool.run(job)
            tol = 1e-4 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64),
                                       rtol=tol, atol=tol * max(1.0, np.sqrt(k)), err_msg=str((m, n, k)))
    finally:
        pool.close()


def test_direct_products_leave_blas_what_it_does_better() -> None:
    no, yes = native_gemm.IR.CBLAS_TRANS, native_gemm.IR.CBLAS_NO_TRANS
    assert native_gemm.direct(256, 512, 10, yes) and native_gemm.direct(10, 512, 256, yes)
    assert not native_gemm.direct(256, 512, 10, no)           # B read down its columns
    assert not native_gemm.direct(256, 10, 512, yes)          # C too narrow
    assert not native_gemm.direct(256, 256, 32, yes)          # neither short nor few rows
    assert not native_gemm.direct(12, 4096, 4096, yes)        # too large


def test_a_product_moves_over_a_bounded_number_of_steps() -> None:
    far = [_loop(10, 20 + k) for k in range(product_groups.REACH + 1)]
    p, q = _product(0, 1, 10), _product(0, 2, 12)
    assert _plan(_exe([p, *far, q])).order[-1] is q             # too far: stays
    assert _plan(_exe([p, *far[:8], q])).order[1] is q          # near: moves up

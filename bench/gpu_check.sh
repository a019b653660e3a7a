#!/usr/bin/env bash
# The GPU check in one command, from the repository root of lazyarray on a machine with an
# NVIDIA GPU and a Python that has numpy, llvmlite and cuda-python (PyTorch beside it for
# the bench):
#
#     bash bench/gpu_check.sh [output-folder]          # PYTHON=... to pick the interpreter
#
# 1. installs lazyarray (editable, no dependency resolution), and any wheel carried in a
#    `wheels/` folder beside the repository or inside it (nvidia-cublas, nvidia-nvjitlink,
#    ...: whatever the machine lacks, fetched elsewhere);
# 2. runs the test suite on "cuda", then on "cpu,cuda", then on "cuda" again in an order
#    drawn from a random seed (--shuffle-seed; the seed is in the summary);
# 3. runs bench/bench_cuda.py beside PyTorch eager and torch.compile (its loop case: a
#    1000-iteration la.fori_loop, a WHILE graph node on 12.4+ drivers, beside a PyTorch
#    Python loop; the suite runs tests/test_control_flow.py's loops on "cuda" too);
# 4. the loop case ("loops"): tests/test_cuda_loops.py and tests/test_control_flow.py on
#    "cuda" (loops and branches as conditional nodes of one CUDA graph where the driver is
#    12.4+, else host-driven; results against the CPU's), then bench/bench_cuda_loops.py:
#    the example decoder's token loop and a 1000-iteration tiny loop in the graph form
#    and the host-driven form, beside the Python loop, NumPy and a PyTorch loop
#    (docs/cuda_loops.md lists what this run is the first to confirm);
# 5. runs the CPU benches (fused work, the MLP step, host costs and pool dispatch) on all
#    of the host's cores beside NumPy, PyTorch and jax.jit (JAX_PLATFORMS=cpu): the
#    scaling figures of the native runtime;
# 6. writes ONE file, <output-folder>/summary.md: pass/fail counts of each run, the first
#    lines of every failure, and the bench tables as ratios (logs and JSON sit beside it).
#
# GPU_CHECK_PHASES picks phases (default "suite bench loops cpu"), so a device session limited
# to 10 minutes a command can run them in separate calls into the same output folder.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${1:-gpu-check-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
SEED="${SHUFFLE_SEED:-$RANDOM}"
TESTS="${GPU_CHECK_TESTS:-tests}"        # a narrower selection for a quick look
PHASES=" ${GPU_CHECK_PHASES:-suite bench loops cpu} "

echo "== install" | tee "$OUT/install.log"
for dir in wheels ../wheels; do
    if ls "$dir"/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install --no-deps --no-index --find-links "$dir" "$dir"/*.whl >>"$OUT/install.log" 2>&1
    fi
done
if ! "$PY" -m pip install --no-deps --no-build-isolation -e . >>"$OUT/install.log" 2>&1; then
    # an editable install of this checkout already there serves as well
    here="$(pwd)"
    "$PY" -c "import lazyarray, os, sys; sys.exit(not lazyarray.__file__.startswith('$here' + os.sep))" \
        || { echo "pip install -e . failed: see $OUT/install.log"; exit 1; }
    echo "install failed; using the editable install of $here already present" | tee -a "$OUT/install.log"
fi
"$PY" - >>"$OUT/install.log" 2>&1 <<'EOF'
import lazyarray as la
from lazyarray.devices.cuda import cuda_driver, cuda_blas, cuda_link
print("cuda:", cuda_driver.missing() or "available")
print("cuBLAS library:", (cuda_blas.library_paths() or ["none found"])[0])
print("nvJitLink:", "yes" if cuda_link.nvjitlink() is not None else "no (PTX is JIT-compiled by the driver)")
try:
    dev = la.runtime.get_device("cuda").device
    print("loop graphs:", dev.loop_graphs_missing() or "conditional nodes (CUDA 12.4+ driver)")
except Exception as e:
    print("loop graphs: unknown:", e)
EOF

XDIST=""
"$PY" -c "import xdist" 2>/dev/null && XDIST="-n auto"
run_suite() {      # name, devices, extra pytest options[, test files: default $TESTS]
    local name="$1" devices="$2" extra="$3"
    shift 3
    local files="${*:-$TESTS}"
    echo "== suite $name (LAZYARRAY_TEST_DEVICES=$devices $extra $files)"
    LAZYARRAY_TEST_DEVICES="$devices" "$PY" -m pytest $files -o addopts="" -q $XDIST -p no:randomly \
        --tb=short -rfE --junitxml="$OUT/$name.xml" $extra >"$OUT/$name.log" 2>&1
    tail -1 "$OUT/$name.log"
}
if [[ "$PHASES" == *" suite "* ]]; then
    run_suite cuda cuda ""
    run_suite cpu_cuda cpu,cuda ""
    run_suite cuda_shuffled cuda "--shuffle-seed $SEED"
fi

if [[ "$PHASES" == *" bench "* ]] && [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
    echo "== bench"
    "$PY" -m pytest bench/bench_cuda.py -o addopts="" -q --benchmark-only \
        --benchmark-json="$OUT/bench_cuda.json" >"$OUT/bench.log" 2>&1
    tail -1 "$OUT/bench.log"
fi

if [[ "$PHASES" == *" loops "* ]]; then
    run_suite loops cuda "" tests/test_cuda_loops.py tests/test_control_flow.py
    echo "== loops bench"
    "$PY" -m pytest bench/bench_cuda_loops.py -o addopts="" -q --benchmark-only \
        --benchmark-json="$OUT/bench_cuda_loops.json" >"$OUT/bench_loops.log" 2>&1
    tail -1 "$OUT/bench_loops.log"
fi

if [[ "$PHASES" == *" cpu "* ]]; then
    echo "== cpu bench on $(nproc) cores"
    JAX_PLATFORMS=cpu "$PY" -m pytest bench/bench_fused.py bench/bench_training.py \
        bench/bench_host.py -o addopts="" -q --benchmark-only \
        --benchmark-json="$OUT/bench_cpu.json" >"$OUT/bench_cpu.log" 2>&1
    tail -1 "$OUT/bench_cpu.log"
fi

"$PY" - "$OUT" "$SEED" <<'EOF'
import glob, os, subprocess, sys
import xml.etree.ElementTree as ET
sys.path.insert(0, "bench")
import report
out, seed = sys.argv[1], sys.argv[2]
lines = ["# lazyarray GPU check", ""]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "nvidia-smi not found"
lines += [f"GPU: {gpu}", f"shuffle seed: {seed}", ""]
with open(os.path.join(out, "install.log")) as f:
    lines += ["```", *[l.rstrip() for l in f if ":" in l and not l.startswith(" ")][-3:], "```", ""]
lines += ["| run | passed | failed | errors | skipped |", "|---|---|---|---|---|"]
failures = []
for name in ("cuda", "cpu_cuda", "cuda_shuffled", "loops"):
    path = os.path.join(out, name + ".xml")
    if not os.path.exists(path):
        lines.append(f"| {name} | (no result: see {name}.log) | | | |")
        continue
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    lines.append(f"| {name} | {passed} | {total['failures']} | {total['errors']} | {total['skipped']} |")
    for case in root.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            failures.append(f"- [{name}] {case.get('classname')}::{case.get('name')}: "
                            + " / ".join(t.strip() for t in text[:3])[:400])
lines += ["", f"## Failures ({len(failures)})", ""] + (failures or ["none"])
lines += ["", "## Bench (bench/bench_cuda.py; ratios: best peer / lazyarray, above 1 = lazyarray faster)", ""]
bench = os.path.join(out, "bench_cuda.json")
if os.path.exists(bench):
    lines.append(report.markdown(report.load(bench)))
else:
    lines.append("no bench results: see bench.log")
loops = os.path.join(out, "bench_cuda_loops.json")
lines += ["", "## Loops (bench/bench_cuda_loops.py: lazyarray = conditional graph nodes, "
          "host-driven = read-ahead)", ""]
lines.append(report.markdown(report.load(loops)) if os.path.exists(loops)
             else "no loop bench results: see bench_loops.log")
cpu = os.path.join(out, "bench_cpu.json")
lines += ["", f"## CPU bench on {os.cpu_count()} cores (best peer / lazyarray)", ""]
lines.append(report.markdown(report.load(cpu)) if os.path.exists(cpu)
             else "no CPU bench results: see bench_cpu.log")
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("summary:", os.path.join(out, "summary.md"))
EOF

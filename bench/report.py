"""Turn a pytest-benchmark JSON file into a Markdown table of ratios and a PNG chart.

    python -m pytest bench/bench_fused.py --benchmark-json=bench/results/cpu.json
    python bench/report.py bench/results/cpu.json

Each row is a workload; each column a framework's median time and its ratio to
lazyarray's (above 1: lazyarray is faster). Where a workload records the bytes it must
move, lazyarray's effective bandwidth is shown beside the memory copy's.
"""
from __future__ import annotations

import collections
import json
import os
import sys


def load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    table: dict = collections.defaultdict(dict)
    for b in data["benchmarks"]:
        fw = b["extra_info"].get("framework")
        if fw is None:          # not a side-by-side workload (e.g. the recording benchmarks)
            continue
        table[b["group"] or b["name"]][fw] = (b["stats"]["median"], b["extra_info"].get("bytes"))
    return table


def load_interleaved(path: str) -> dict:
    """workload -> {framework: median} of bench_fused's interleaved measurements."""
    with open(path) as f:
        data = json.load(f)
    return {b["group"]: b["extra_info"]["interleaved"] for b in data["benchmarks"]
            if "interleaved" in b["extra_info"]}


def is_peer(framework: str) -> bool:
    """Another project's column, not one of ours (lazyarray's run-only time, the Python
    pool it replaced): only peers count in the ratio."""
    return not framework.startswith(("lazyarray", "python pool"))


def markdown_interleaved(table: dict) -> str:
    """The interleaved measurements: every framework in turn within each round (a shared
    machine's drift falls on all alike)."""
    if not table:
        return ""
    frameworks = sorted({fw for row in table.values() for fw in row},
                        key=lambda f: (f != "lazyarray", f))
    head = "| workload | " + " | ".join(frameworks) + f" | {RATIO} |"
    lines = ["\nInterleaved (every framework in turn within each round; medians):\n", head,
             "|" + "---|" * (head.count("|") - 1)]
    for name, row in table.items():
        cells = [_time(row[f]) if f in row else "—" for f in frameworks]
        peers = [t for f, t in row.items() if is_peer(f)]
        ratio = f"{min(peers) / row['lazyarray']:.2f}x" if "lazyarray" in row and peers else "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def load_first_steps(path: str) -> dict:
    """workload -> {framework: (first call's seconds, compiles)} where a benchmark recorded
    them (bench_models)."""
    with open(path) as f:
        data = json.load(f)
    table: dict = collections.defaultdict(dict)
    for b in data["benchmarks"]:
        info = b["extra_info"]
        if "first_step_s" in info and "framework" in info:
            table[b["group"]][info["framework"]] = (info["first_step_s"], info.get("compiles"))
    return table


def markdown_first_steps(table: dict) -> str:
    """The first call of each framework (compile included) and its compiles."""
    if not table:
        return ""
    frameworks = sorted({fw for row in table.values() for fw in row},
                        key=lambda f: (not f.startswith("lazyarray"), f))
    head = "| workload | " + " | ".join(frameworks) + " |"
    lines = ["\nFirst call, compile included (seconds; compiles in brackets):\n", head,
             "|" + "---|" * (head.count("|") - 1)]
    for name, row in table.items():
        cells = [f"{row[f][0]:.2f} s ({row[f][1]})" if f in row else "—" for f in frameworks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown(table: dict) -> str:
    frameworks = sorted({fw for row in table.values() for fw in row},
                        key=lambda f: (f != "lazyarray", f))
    copies = table.get("memory copy", {}).values()
    copy_bw = max((nbytes / t for t, nbytes in copies if nbytes), default=None)
    head = "| workload | " + " | ".join(frameworks) + f" | {RATIO} |"
    if copy_bw:
        head += " lazyarray bandwidth (% of copy) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in table.items():
        if name == "memory copy":
            continue
        cells = [_time(row[f][0]) if f in row else "—" for f in frameworks]
        la = row.get("lazyarray")
        peers = [v[0] for f, v in row.items() if is_peer(f)]
        ratio = f"{min(peers) / la[0]:.2f}x" if la and peers else "—"
        line = f"| {name} | " + " | ".join(cells) + f" | {ratio} |"
        if copy_bw:
            bw = la[1] / la[0] / copy_bw * 100 if la and la[1] else None
            line += f" {bw:.0f}% |" if bw else " — |"
        lines.append(line)
    if copy_bw:
        lines.append(f"\nMemory copy (the faster of NumPy copyto and PyTorch copy_, read + write): "
                     f"{copy_bw / 1e9:.1f} GB/s.")
    return "\n".join(lines) + "\n"


# the ratio's column: which way it reads is in its name
RATIO = "best peer time / lazyarray time (>1: lazyarray faster)"


def machine(path: str) -> str:
    """One line naming the machine and the time of the run, from pytest-benchmark's
    machine_info: the figures are this machine's, not another's."""
    with open(path) as f:
        data = json.load(f)
    info = data.get("machine_info", {})
    cpu = info.get("cpu", {})
    when = str(data.get("datetime", ""))[:16].replace("T", " ")
    return (f"Machine: {cpu.get('brand_raw', 'unknown CPU')}, {cpu.get('count', '?')} cores "
            f"({info.get('machine', '?')}, {info.get('system', '?')} {info.get('release', '')}),"
            f" Python {info.get('python_version', '?')}; run {when} UTC; medians.\n\n")


def _time(seconds: float) -> str:
    """A median with its unit: ms down to 1 ms, then µs (the host-cost benchmarks)."""
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def chart(table: dict, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [(n, r) for n, r in table.items() if n != "memory copy" and "lazyarray" in r]
    frameworks = sorted({f for _, r in rows for f in r}, key=lambda f: (f != "lazyarray", f))
    fig, ax = plt.subplots(figsize=(10, 4 + len(rows) * 0.3))
    width = 0.8 / max(len(frameworks), 1)
    for i, f in enumerate(frameworks):
        speed = [r["lazyarray"][0] / r[f][0] if f in r else 0 for _, r in rows]
        ax.barh([j + i * width for j in range(len(rows))], speed, height=width, label=f)
    ax.set_yticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_yticklabels([n for n, _ in rows])
    ax.set_xlabel("speed relative to lazyarray (higher is faster)")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: list) -> None:
    src = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "results", "cpu.json")
    table = load(src)
    base = os.path.splitext(src)[0]
    text = machine(src) + (markdown(table) if table else "") + \
        markdown_interleaved(load_interleaved(src)) + markdown_first_steps(load_first_steps(src))
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    if chart(table, base + ".png"):
        print(f"chart: {base}.png")


if __name__ == "__main__":
    main(sys.argv)

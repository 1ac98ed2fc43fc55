"""`optiml generate` with scripted answers on the GPU machine, one task: the project's local Chat
Completions test server (tests/chat_server.py) answers with the scripted strategies and the real
kernels beside this file (one deliberately slow, one broken and then repaired), ``python3 -m optiml
generate`` runs on the example's spec against it, and the figures it is judged by (the verified best
against the worst verified strategy) are printed from the trace database.

usage: python3 bench/generate/scripted_task.py TASK OUT [-- GENERATE_ARGS...]
  TASK: softmax_rows or reduce_sum (examples/TASK/TASK.toml); OUT: the folder for TASK.db and the kernel
  --check: only check that every scripted kernel compiles with nvcc (no GPU needed)
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT  # noqa: E402

HERE = Path(__file__).resolve().parent

TASKS = {
    "softmax_rows": {
        "describe": "row-wise softmax of a ROWS x COLS float32 matrix (row-major), numerically stable",
        "strategies": [
            ("one thread per row", "1_thread_per_row.cu",
             "Each thread walks its whole row three times: max, sum of exponentials, normalise."),
            ("block per row with a shared-memory reduction", "2_block_per_row.cu",
             "The threads of a block stride over one row and combine partial max and sum in shared memory."),
            ("warp per row with an online max and sum", "3_warp_per_row.cu",
             "One warp per row keeps a running max and sum in one pass, merged with shuffles."),
        ],
        "broken": "3_warp_per_row.broken.cu",
    },
    "reduce_sum": {
        "describe": "sum of N float32 values added into out[0]",
        "strategies": [
            ("one thread per chunk", "1_serial_per_block.cu",
             "A single-thread block adds its chunk serially and adds it to out[0] with one atomic."),
            ("shared-memory tree per block", "2_block_tree.cu",
             "Each block reduces 2 * BLOCK elements with a tree in shared memory; one atomic per block."),
            ("grid-stride loop with warp shuffles", "3_grid_stride_shuffle.cu",
             "Fewer blocks, each thread adds many elements, warps reduce with shuffles; one atomic per block."),
        ],
        "broken": "3_grid_stride_shuffle.broken.cu",
    },
}


def answers(task: str) -> list[str]:
    """The scripted answers in the order optiml asks: the strategies, the three kernels (the third
    broken), then the third's repair."""
    t = TASKS[task]
    strategies = "".join(f"STRATEGY {i}: {name}\n{detail}\n" for i, (name, _, detail) in enumerate(t["strategies"], 1))

    def kernel(name: str, file: str) -> str:
        return f"KERNEL: {name}\nWHY: see the comment at the top.\n```cuda\n{(HERE / task / file).read_text()}```\n"
    (n1, f1, _), (n2, f2, _), (n3, f3, _) = t["strategies"]
    return [strategies, kernel(n1, f1), kernel(n2, f2), kernel(n3, t["broken"]), kernel(n3 + ", repaired", f3)]


def check() -> int:
    """Every scripted kernel compiles with nvcc for sm_90 (the broken ones must not)."""
    bad = 0
    for task, t in TASKS.items():
        for path in sorted((HERE / task).glob("*.cu")):
            r = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-cubin", "-o", "/dev/null", str(path)],
                               capture_output=True, text=True)
            want = path.name != t["broken"]
            ok = (r.returncode == 0) == want
            bad += not ok
            print(f"{task}/{path.name}: {'compiles' if r.returncode == 0 else 'does not compile'}"
                  f"{'' if ok else '  <-- unexpected'}")
    return 1 if bad else 0


def figures(db: Path, run_id: int = 1) -> bool:
    """The strategies, the slowest verified one, the final best and whether it beats the slowest."""
    from optiml.traces.store import TraceStore

    with TraceStore(db, read_only=True) as store:
        run = store.run(run_id)
        nodes = store.nodes(run_id)
        root = nodes[0]
        print(f"run {run_id} ({run['status']}): {len(nodes) - 1} candidates under the description")
        for n in nodes:
            if n.parent_id == root.id:
                e = store.evaluation(n.id) or {}
                ms = f"{e['median_ms']:.4f} ms" if e.get("median_ms") else "-"
                print(f"  node {n.id:3d} {e.get('status', n.status):14s} {ms:>12s}  {n.edit}")
        final = run.get("result") or {}
        if final.get("status") != "ok":
            print(f"final: {final.get('status')}: {final.get('message')}")
            return False
        best = store.node(final["best_node"])
        path = [n.edit for n in store.path_to(best.id)[1:]]
        low, high = final.get("speedup_low"), final.get("speedup_high")
        print(f"slowest verified strategy: node {final['slowest_strategy_node']}, {final['seed_ms']:.4f} ms "
              f"(timed interleaved with the best)")
        print(f"best: node {best.id}, {final['best_ms']:.4f} ms, {final['speedup']:.2f}x over the slowest"
              + (f" (95 % {low:.2f}-{high:.2f}x)" if low and high else "") + f"; path: {' -> '.join(path)}")
        beats = final["best_ms"] < final["seed_ms"]
        print(f"done-when: the verified best {'beats' if beats else 'does NOT beat'} the worst verified strategy")
        return beats


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]) or not argv:
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--check":
        return check()
    task, out, extra = argv[0], Path(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:]
    if task not in TASKS:
        print(f"scripted_task.py: TASK is softmax_rows or reduce_sum, not {task!r}.", file=sys.stderr)
        return 2
    from tests.chat_server import ChatServer

    out.mkdir(parents=True, exist_ok=True)
    db = out / f"{task}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    server = ChatServer().start()
    try:
        script = answers(task)
        server.script(*script)
        spec = ROOT / "examples" / task / f"{task}.toml"
        cmd = [sys.executable, "-m", "optiml", "generate", str(spec), "--describe", TASKS[task]["describe"],
               "--strategies", "3", "--llm-model", "scripted", "--llm-base-url", server.url, "--db", str(db),
               "-o", str(out / f"{task}.generated.cu"), *extra]
        print("$ " + " ".join(cmd[1:3]) + " " + " ".join(f"'{c}'" if " " in c else c for c in cmd[3:]), flush=True)
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        print(f"chat server: {len(server.requests)} requests for {len(script)} scripted answers")
    finally:
        server.stop()
    if not db.exists():
        return rc or 1
    beats = figures(db)
    return rc or (0 if beats else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""KernelBench level-1 first kernels (k/NAME.cu with its spec k/NAME.toml from `optiml init
--kernelbench`, TODOs fixed; tasks/ holds the KernelBench task files): which optiml template each is
offered, or why none, and on a GPU machine whether each seed and each offered template verifies
against the task's reference (verify sizes only, no timing).

    python3 bench/kernelbench/level1/check.py [--drafts]    # recognition and init's drafts (CPU)
    python3 bench/kernelbench/level1/check.py --gpu OUT.jsonl [NAME ...]   # and verification (GPU)

A spec's reference k/NAME_ref.py (the task's Model's forward) is generated, not kept in git: before
anything else this writes it as `optiml init --kernelbench` does, from the kernel and its task
(map.txt), beside the spec that names it. The few references written by hand (k/frob_ref.py,
k/hand_ref.py) are kept.
"""
import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)

HERE = Path(__file__).resolve().parent


sys.path.insert(0, str(HERE.parent))                               # bench/kernelbench: corpus.py
import corpus  # noqa: E402


def tasks() -> dict:
    """{kernel name: its KernelBench task file}, from map.txt."""
    return corpus.tasks(HERE)


def write_references(names=()) -> list:
    """The generated references k/NAME_ref.py written where missing or stale (corpus.write_references)."""
    return corpus.write_references(HERE, names)


def offers(names=()):
    """{kernel name: (template name or None, the candidate's source or the reason)}."""
    return corpus.offers(HERE, names)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafts", action="store_true", help="also init's outcome and each field where its draft differs from the spec")
    ap.add_argument("--gpu", metavar="OUT", help="also verify each seed and offered template, one JSON line each")
    ap.add_argument("--keep-drafts", action="store_true",
                    help="with --drafts --gpu: verify the k/NAME.draft.toml an earlier --drafts wrote, without drafting again")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="kernels drafted at a time, each in its own process")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    from optiml.errors import UserError
    try:
        found = offers(args.names)
    except UserError as e:
        raise SystemExit(f"check.py: {str(e).rstrip('.')}.") from None
    task_of, as_is, verified = tasks(), 0, 0
    drafting = args.drafts and not args.keep_drafts
    outcomes = corpus.draft_outcomes(HERE, list(found) if drafting else [], task_of, args.jobs)
    for name, (t, what) in found.items():
        print(f"{name:22} {t if t else 'refused: ' + str(what)[:110]}", flush=True)
        if drafting:
            _, d = next(outcomes)
            as_is += "failed" not in d and not d["diff"]
            verified += bool(d.get("verified"))
            print(f"    init failed: {d['failed']}" if "failed" in d else
                  f"    drafted, {'emulated ok' if d['verified'] else 'unverified'}, {len(d['diff'])} fields differ\n" +
                  "".join(f"      {k}: {a!r} -> {b!r}\n" for k, a, b in d["diff"]), end="" if "failed" not in d else "\n")
    if args.drafts:
        print(f"{as_is} of {len(found)} drafted with no field edited; {verified} verified by init on the CPU emulation "
              "(written as k/NAME.draft.toml)")
    print(f"{sum(1 for t, _ in found.values() if t)} of {len(found)} offered a template")
    if not args.gpu:
        return
    import optiml
    tmp = HERE / "build"
    tmp.mkdir(exist_ok=True)
    jobs = []
    for name, (t, what) in found.items():
        jobs.append((name, "seed", HERE / "k" / f"{name}.cu"))
        if (HERE / "k" / f"{name}.draft.toml").is_file() and args.drafts:
            jobs.append((name, "draft", HERE / "k" / f"{name}.cu"))
        if t:
            cand = tmp / f"{name}__{t}.cu"
            cand.write_text(what)
            jobs.append((name, t, cand))

    def one(job):
        name, kind, cu = job
        spec = HERE / "k" / f"{name}.{'draft' if kind == 'draft' else 'gpu'}.toml"
        try:
            ev = optiml.evaluate(str(cu), str(spec), time_it=False, timeout_s=120)
            return dict(kernel=name, kind=kind, status=ev.status, message=ev.message[:400])
        except Exception as e:                  # noqa: BLE001 - report it and go on
            return dict(kernel=name, kind=kind, status="exception", message=f"{type(e).__name__}: {e}"[:400])
    with open(args.gpu, "w") as out, ThreadPoolExecutor(int(os.environ.get("JOBS", "4"))) as ex:
        for r in ex.map(one, jobs):
            print(r["kind"], r["kernel"], r["status"], r["message"][:160], flush=True)
            out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

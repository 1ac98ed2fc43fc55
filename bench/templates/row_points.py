"""Points of a row template written out as kernels, for `optiml eval` (verification, the sanitizer
and timing of each point without a search):

    python3 bench/templates/row_points.py operations/softmax_kb.cu row_cluster OUT_DIR \
        '{}' '{"OPTIML_CLUSTER": 4, "OPTIML_THREADS": 512, "OPTIML_ITEMS": 8}'
    for f in OUT_DIR/*.cu; do python3 -m optiml eval $f --spec bench/templates/operations/softmax_kb.toml --json; done

Each point is the template's start for the spec's timing size with the values given replacing its
own (`{}`: the start itself); the kernel is written as OUT_DIR/<stem>_<i>.cu. The kernel is a path
under bench/templates or any other (`--spec`: its spec where it is not KERNEL.toml, e.g. a KernelBench
kernel's NAME.gpu.toml); where the kernel's code is not read as row-wise, the reference's operation is
(as the rules read it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Each POINT is a JSON object of the template's constants ('{}': its start).")
    ap.add_argument("kernel", help="a first kernel under bench/templates, e.g. operations/softmax_kb.cu")
    ap.add_argument("template", help="a row template: row_reduce, col_reduce, row_cluster or row_grid")
    ap.add_argument("out", type=Path, help="the folder the kernels are written to")
    ap.add_argument("points", nargs="+", metavar="POINT")
    ap.add_argument("--spec", type=Path, help="the kernel's spec (default: KERNEL.toml beside it)")
    args = ap.parse_args(argv)
    from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
    from optiml.spec.load import load_spec
    kernel = Path(__file__).resolve().parent / args.kernel
    if not kernel.is_file():
        kernel = Path(args.kernel).resolve()
    if not kernel.is_file():
        print(f"row_points.py: no kernel {kernel}", file=sys.stderr)
        return 2
    t = next((t for t in ROW_TEMPLATES if t.name == args.template), None)
    if t is None:
        print(f"row_points.py: no row template {args.template} (there are {', '.join(t.name for t in ROW_TEMPLATES)})",
              file=sys.stderr)
        return 2
    try:
        given = [json.loads(p) for p in args.points]
    except json.JSONDecodeError as e:
        print(f"row_points.py: a POINT is not a JSON object: {e}", file=sys.stderr)
        return 2
    src = kernel.read_text()
    spec = load_spec(args.spec or kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    if op is None:
        from optiml.edits.templates.traced_rows import read_reference
        traced, why_traced = read_reference(src, spec.entry, spec)
        op, why = (traced, why) if traced is not None and hasattr(traced, "steps") else (None, why or why_traced)
    if op is None:
        print(f"{args.kernel}: {why}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for i, g in enumerate(given):
        point = dict(t.start_for(op), **g)
        path = args.out / f"{kernel.stem}_{i}.cu"
        path.write_text(instantiate_rowwise(src, op, point, t.name))
        print(path, " ".join(f"{k.removeprefix('OPTIML_')}={v}" for k, v in point.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

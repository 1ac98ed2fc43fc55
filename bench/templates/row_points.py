"""Points of a row template written out as kernels, for `optiml eval` (verification, the sanitizer
and timing of each point without a search):

    python3 bench/templates/row_points.py operations/softmax_kb.cu row_cluster OUT_DIR \
        '{}' '{"OPTIML_CLUSTER": 4, "OPTIML_THREADS": 512, "OPTIML_ITEMS": 8}'
    for f in OUT_DIR/*.cu; do python3 -m optiml eval $f --spec bench/templates/operations/softmax_kb.toml --json; done

Each point is the template's start for the spec's timing size with the values given replacing its
own (`{}`: the start itself); the kernel is written as OUT_DIR/<stem>_<i>.cu.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
    from optiml.spec.load import load_spec
    kernel = Path(__file__).resolve().parent / argv[0]
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    if op is None:
        print(f"{argv[0]}: {why}", file=sys.stderr)
        return 1
    t = next((t for t in ROW_TEMPLATES if t.name == argv[1]), None)
    if t is None:
        print(f"no row template {argv[1]} (there are {', '.join(t.name for t in ROW_TEMPLATES)})", file=sys.stderr)
        return 2
    for i, given in enumerate(argv[3:]):
        point = dict(t.start_for(op), **json.loads(given))
        path = out / f"{kernel.stem}_{i}.cu"
        path.write_text(instantiate_rowwise(src, op, point, t.name))
        print(path, " ".join(f"{k.removeprefix('OPTIML_')}={v}" for k, v in point.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

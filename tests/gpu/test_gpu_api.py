"""GPU tests of the Python API (docs/api.md): optiml.optimize on examples/transpose_naive from a
script, once from its kernel file and spec, once from the source and NumPy arrays with a Python
reference; and optiml.evaluate of the arrays' task.

    python3 -m pytest -m gpu tests/gpu -v
"""
import numpy as np
import pytest

import optiml
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

KERNEL = EXAMPLES / "transpose_naive" / "transpose_naive.cu"


def transposed(**arrays):
    """The reference: called with the inputs and scalars by the kernel's parameter names ("in" is
    a Python keyword, hence **arrays), returning the output."""
    return arrays["in"].T


def check(result, db):
    assert result.run_id >= 1 and result.db == db and result.speedup > 0
    assert "__global__ void transpose_naive" in result.best_source and result.flags[0].startswith("-arch=")
    df = result.trajectory
    assert len(df) == result.evaluations + 1 and df["is_best"].sum() == 1
    assert df[df["is_best"]]["node_id"].iloc[0] == result.final["best_node"]
    assert (df["eval_status"] == "ok").any() and df["median_ms"].notna().any()


def test_optimize_an_example_from_its_files(tmp_path):
    db = tmp_path / "api.db"
    result = optiml.optimize(KERNEL, budget=4, profile=False, db=db, output=tmp_path / "best.cu")
    check(result, db)
    assert result.final["status"] == "ok" and (tmp_path / "best.cu").read_text().endswith(result.best_source)


def test_optimize_an_example_from_arrays_with_a_python_reference(tmp_path):
    rows, cols = 2048, 1536
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    task = dict(outputs=["out"], grid=["cdiv(COLS, BLOCK_X)", "cdiv(ROWS, BLOCK_Y)"], block=["BLOCK_X", "BLOCK_Y"],
                sizes={"ROWS": rows, "COLS": cols}, verify_sizes=[{"ROWS": 1000, "COLS": 77}, {"ROWS": 33, "COLS": 4097}],
                atol=0.0, rtol=0.0, reference=transposed)
    args = [x, np.empty((cols, rows), np.float32), np.int32(rows), np.int32(cols)]
    ev = optiml.evaluate(KERNEL.read_text(), args=args, **task)
    assert ev.ok and ev.median_ms > 0, ev.message
    db = tmp_path / "api.db"
    result = optiml.optimize(KERNEL.read_text(), args=args, budget=4, profile=False, db=db, **task)
    check(result, db)
    assert result.kernel.parent.parent == tmp_path / "optiml_tasks"

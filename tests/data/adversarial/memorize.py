"""Writes vadd_memorized_table.h: the true outputs a + b of the vadd spec at N = 1000 for the
inputs drawn with seed 1234 (optiml's own input generator), which vadd_memorized.cu returns
whatever its inputs are.  Run from the repository root: python3 tests/data/adversarial/memorize.py"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from optiml.spec import load_spec  # noqa: E402
from optiml.verify.inputs import make_case  # noqa: E402

N, SEED = 1000, 1234


def memorized():
    spec = load_spec(HERE / "vadd_memorized.toml")
    data = make_case(spec, {"N": N}, SEED)
    return data.arrays["a"] + data.arrays["b"]


if __name__ == "__main__":
    values = memorized()
    lines = [f"// Made by memorize.py: a + b of the vadd spec at N = {N}, seed {SEED}. Do not edit.",
             f"#define MEMORIZED_N {N}",
             f"__device__ const float MEMORIZED_OUT[{N}] = {{"]
    lines += ["    " + ", ".join(f"{float(v).hex()}" for v in values[k:k + 6]) + "," for k in range(0, N, 6)]
    lines.append("};")
    (HERE / "vadd_memorized_table.h").write_text("\n".join(lines) + "\n")

"""A FAKE GPU for semantics: a CUDA kernel whose threads never cooperate (no barriers, shuffles or
shared memory between them) compiled as C++ with a few definitions for CUDA's names and run on the
CPU, every thread of the grid in turn, under AddressSanitizer. Never a GPU result: it checks that a
rewrite computes what the kernel computes, element for element, and touches no memory outside the
arrays, on a machine without a GPU."""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from optiml.draft import emulate as _emulate
from optiml.edits.cutree import _entry_def, _params, _t, _tree

GXX = _emulate.GXX


def _libcudacxx() -> list[str]:
    """``-I`` for CUDA's C++ library (``cuda/std/limits``, which reduce_all includes), where it is."""
    import glob
    import os
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             str(Path(shutil.which("nvcc")).resolve().parent.parent) if shutil.which("nvcc") else None,
             *sorted(glob.glob("/usr/local/cuda*"), reverse=True)]
    for r in filter(None, roots):
        for inc in (Path(r) / "include" / "cccl", Path(r) / "include"):
            if (inc / "cuda" / "std" / "limits").is_file():
                return [f"-I{inc}"]
    return []


_CUDA_INCLUDE = _libcudacxx()

# the shims of the package's CPU emulation (optiml/draft/emulate.py): one text for init's trials and these tests
SHIM, THREADED = _emulate.SHIM, _emulate.THREADED

# The block all-reduce of optiml's templates, for threads run one by one from the LAST to the first:
# each thread folds its value into the block's running result, so thread 0, run last, gets the whole
# block's (the only thread whose result reduce_all uses). The vector type is the templates' own.
HOST_ALLREDUCE = r"""
#define optiml_row_helpers
template <typename optiml_E, int optiml_N> struct alignas(sizeof(optiml_E) * optiml_N) optiml_vec { optiml_E v[optiml_N]; };
template <int optiml_THR, int optiml_RWS, typename optiml_V, typename optiml_Op>
static optiml_V optiml_allreduce(optiml_V optiml_x, optiml_Op optiml_op) {
    static optiml_V running;
    running = threadIdx.x == blockDim.x - 1 ? optiml_x : optiml_op(running, optiml_x);
    return running;
}
"""

_FLAGS = ("-std=c++20", "-pthread", "-O1", "-g", "-fsanitize=address", "-ffp-contract=off", "-w", *_CUDA_INCLUDE)
# cooperating threads as fibers (the shim's user-space switching, as init's searches run them) under
# AddressSanitizer too: out-of-bounds accesses are caught as with OS threads, which cost a block of
# 1024 threads about a second of system time a run (20x the fibers'); ASan warns once that it does
# not fully support swapcontext, and a false report would fail the test, not pass it
_FIBERS = ("-DOPTIML_FIBERS=1", "-U_FORTIFY_SOURCE")
_PCH: dict[str, Path | None] = {}


def _precompiled(shim: str, flags: tuple) -> Path | None:
    """A folder holding ``shim`` as a precompiled header (optiml_shim.hpp and its .gch, built once a
    process with the same ``flags`` as the programs that include it): the shim was most of a small
    program's compile time. None where it does not build (the shim then goes inline, as before)."""
    key = hashlib.sha256((shim + " ".join(flags)).encode()).hexdigest()[:16]
    if key not in _PCH:
        d = Path(tempfile.mkdtemp(prefix=f"optiml-host-pch-{os.getpid()}-{key}-"))
        atexit.register(shutil.rmtree, d, True)       # about 80 MB a header: gone with the process
        (d / "optiml_shim.hpp").write_text(shim)
        r = subprocess.run([GXX, *flags, "-x", "c++-header", str(d / "optiml_shim.hpp"), "-o",
                            str(d / "optiml_shim.hpp.gch")], capture_output=True, text=True)
        _PCH[key] = d if r.returncode == 0 else None
    return _PCH[key]


_FORMAT = {"float": ("%a", "(double)"), "double": ("%a", ""), "int": ("%d", ""), "unsigned": ("%u", ""),
           "unsigned int": ("%u", ""), "long long": ("%lld", ""), "size_t": ("%zu", "")}


def run_on_host(tmp: Path, name: str, source: str, entry: str, counts: dict, scalars: dict, grid: tuple,
                block: tuple, poisoned: tuple = (), offsets: tuple = (0, 1), allreduce: bool = False,
                threaded: bool = False) -> list[list[str]]:
    """Run ``entry`` of ``source`` over ``grid`` x ``block`` with arrays of ``counts`` elements (their
    data a fixed pattern; the ``poisoned`` ones a sentinel, so what is not written shows), each
    starting ``offset`` elements into its allocation (an offset of 1 makes vectors misaligned; one
    run for each of ``offsets``), and ``scalars``; returns, for each offset, every array's elements
    afterwards, one text line each (floats exactly, as ``%a``). With ``allreduce``, a block's threads run from the last to the first and the templates'
    block all-reduce is :data:`HOST_ALLREDUCE`; with ``threaded``, threads cooperate for real
    (:data:`THREADED`: barriers, shuffles, shared memory, atomics). Raises AssertionError with the compiler's or
    AddressSanitizer's words on a failure."""
    fn, fdecl = _entry_def(_tree(source), entry)
    lines, args, dumps = [], [], []
    for pname, _, ptr, p in _params(fdecl):
        ty = _t(p.child_by_field_name("type"))
        if ptr is None:
            args.append(f"({ty})({scalars[pname]})")
            continue
        n = counts[pname]
        lines.append(f"    {ty} *{pname}_mem = new {ty}[{n} + offset];")
        lines.append(f"    {ty} *{pname}_at = {pname}_mem + offset;")
        salt = 13 * len(dumps)                      # each array its own values
        fill = "12345" if pname in poisoned else f"((j * 37 + 11 + {salt}) % 101) / 25.0 - 2.0" if ty in ("float", "double") \
            else f"(j * 7 + 3 + {salt}) % 23 - 11"
        lines.append(f"    for (long long j = 0; j < {n}; j++) {pname}_at[j] = ({ty})({fill});")
        args.append(f"{pname}_at")
        fmt, cast = _FORMAT.get(ty, ("%d", "(int)"))
        dumps.append(f'    for (long long j = 0; j < {n}; j++) printf("{fmt} ", {cast}{pname}_at[j]); printf("\\n");')
    main = ("int main(int argc, char **argv) {\n    const int offset = atoi(argv[1]);\n" + "\n".join(lines) + "\n"
            f"    gridDim.x = {grid[0]}; gridDim.y = {grid[1] if len(grid) > 1 else 1};\n"
            f"    blockDim.x = {block[0]}; blockDim.y = {block[1] if len(block) > 1 else 1};\n"
            + (f"    optiml_host_launch([&] {{ {entry}({', '.join(args)}); }});\n" if threaded else
               "    for (unsigned by = 0; by < gridDim.y; by++) for (unsigned bx = 0; bx < gridDim.x; bx++)\n"
               "    for (unsigned ty = 0; ty < blockDim.y; ty++) for (unsigned t = 0; t < blockDim.x; t++) {\n"
               f"        unsigned tx = {'blockDim.x - 1 - t' if allreduce else 't'};\n"
               "        blockIdx.x = bx; blockIdx.y = by; threadIdx.x = tx; threadIdx.y = ty;\n"
               f"        {entry}({', '.join(args)});\n    }}\n") + "\n".join(dumps) + "\n    return 0;\n}\n")
    src = tmp / f"{name}.cpp"
    shim = THREADED if threaded else SHIM + (HOST_ALLREDUCE if allreduce else "")
    flags = (*_FLAGS, *_FIBERS) if threaded else _FLAGS
    pch = _precompiled(shim, flags)
    src.write_text(('#include "optiml_shim.hpp"\n' if pch else shim) + source + "\n" + main)
    exe = tmp / name
    r = subprocess.run([GXX, *flags, *(["-I", str(pch)] if pch else []), "-x", "c++",
                        str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = []
    for offset in offsets:
        r = subprocess.run([str(exe), str(offset)], capture_output=True, text=True, timeout=120,
                           env={"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(r.stdout.splitlines())
    return out

"""Drafts chosen by testing: where reading a kernel leaves its integer arguments, scalars or launch
unsure, the plausible assignments run on the CPU emulation (:mod:`optiml.draft.emulate`) at two
reduced sizes against what the task computes there, and the first that verifies at both is kept.

The candidates come ordered, the reading's draft first; a combination's rank is the sum of its
choices' positions, so the search tries what differs least from the reading first, and stops at
``max_runs``. What was tried is said either way, so a draft that stays unsure says what to fill in.
"""
from __future__ import annotations

import itertools
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .. import expr as _expr
from .emulate import DYN_SHARED, TOO_LARGE, HostKernel


@dataclass(frozen=True)
class Launch:
    grid: tuple[str, ...]
    block: tuple[str, ...]
    shared: str = "0"
    note: str = ""
    prefer: int = 0         # its block's place among the blocks worth trying (the kernel's own constant first)

    def text(self) -> str:
        out = f"grid [{', '.join(self.grid)}], block [{', '.join(self.block)}]"
        return out + (f", {self.shared} bytes of shared memory" if self.shared != "0" else "")


@dataclass
class Case:
    """One size set: the sizes, and for each pointer its value before the launch (inputs and the
    Model's parameters; NaN for outputs, so an unwritten element shows; 0 for an output the kernel adds
    into) and after it (the task's outputs; None for an input)."""
    sizes: dict
    before: dict
    after: dict


@dataclass
class Outcome:
    verified: bool
    scalars: dict = field(default_factory=dict)     # {name: the chosen value (an expression or number)}
    launch: Launch | None = None
    tried: int = 0
    drafted_ok: bool = False
    why: str = ""                                   # the drafted one's failure, when it failed
    said: str = ""                                  # what was tested, in a phrase for the spec's comments


def agreement(got: np.ndarray, want: np.ndarray) -> float:
    """The fraction of an output's elements that are what the task computes: exactly for integers;
    for floats within 1e-3 relative and 1e-3 of the reference's RMS (the emulation and PyTorch on the
    CPU both compute in the task's precision), NaN exactly where the reference has NaN."""
    got, want = got.reshape(-1), np.asarray(want).reshape(-1)
    if got.shape != want.shape or not want.size:
        return float(got.shape == want.shape)
    if not np.issubdtype(want.dtype, np.floating):
        return float(np.mean(got == want))
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan_w, nan_g = np.isnan(w), np.isnan(g)
    finite = w[np.isfinite(w)]
    rms = float(np.sqrt(np.mean(finite * finite))) if finite.size else 1.0
    with np.errstate(invalid="ignore"):
        close = np.abs(g - w) <= 1e-3 * np.abs(w) + 1e-3 * rms + 1e-7
    return float(np.mean(np.where(nan_w, nan_g, close & ~nan_g)))


class Trial:
    """Runs assignments of a kernel's scalars and launch on the CPU emulation at the cases."""

    def __init__(self, host: HostKernel, cases: list[Case], constants: dict, larger=None):
        self.host, self.cases, self.constants = host, cases, constants
        self.runs = 0
        self.timeout_s = 20.0       # a run's limit: what is left of the search's time, 20 s at least
        self._larger, self._large = larger, None      # a case past any block's size, made when first needed
        self._medium = None

    def _env(self, sizes: dict) -> dict:
        return {**{k: v for k, v in self.constants.items() if isinstance(v, (int, float))}, **sizes}

    def score(self, scalars: dict, launch: Launch, case: Case, sanitize: bool = False) -> tuple[float, str]:
        """(the fraction of output elements right, -1 where it does not run; the sentence why not all)."""
        self.runs += 1
        env = self._env(case.sizes)
        try:
            values = dict(case.before)
            for name, v in scalars.items():
                values[name] = _expr.evaluate(v, env) if isinstance(v, str) else v
            env = {**env, **{n: values[n] for n in scalars if isinstance(values[n], (int, float))}}
            grid = [_expr.evaluate_int(g, env) for g in launch.grid]
            block = [_expr.evaluate_int(b, env) for b in launch.block]
            shared = _expr.evaluate_int(launch.shared, env)
        except Exception as e:                   # noqa: BLE001 - an expression the sizes cannot give
            return -1.0, f"its launch or values do not evaluate ({e})"
        got = self.host.run(grid, block, shared, values, timeout_s=self.timeout_s, sanitize=sanitize)
        if isinstance(got, str):
            return -1.0, got
        parts = {n: agreement(got[n], want) for n, want in case.after.items() if want is not None}
        wrong = [n for n, f in parts.items() if f < 1.0]
        frac = float(np.mean(list(parts.values()))) if parts else 1.0
        return frac, (f"{', '.join(wrong)} differ from the task's" if wrong else "")

    def confirmed(self, scalars: dict, launch: Launch) -> str:
        """'' where the assignment verifies at the larger case (where the task runs there and the
        launch is not too large for the emulation) and then at every case under AddressSanitizer
        (but those too large, so long as one ran, or the larger case ran plain); else why not."""
        if self._larger is not None and self._large is None:
            self._large = self._larger() or False
        larger_ran = False
        if self._large:
            frac, why = self.score(scalars, launch, self._large)
            if why == TOO_LARGE:            # sizes spread less (blocks up to 64)
                if self._medium is None:
                    self._medium = self._larger((97, 193, 289, 385)) or False
                if self._medium:
                    frac, why = self.score(scalars, launch, self._medium)
            if frac < 1.0 and why != TOO_LARGE:          # past what the emulation runs: not a failure
                return why + " (at larger sizes)" if why else "not all right at larger sizes"
            larger_ran = why != TOO_LARGE
        ran = 0
        for case in self.cases:
            frac, why = self.score(scalars, launch, case, sanitize=True)
            if frac < 1.0 and why != TOO_LARGE:
                return why
            ran += why != TOO_LARGE
        # under AddressSanitizer a block's threads are OS threads, so a launch of many blocks of many
        # threads may be too large there at every case: the plain runs (arrays inside NaN margins) at the
        # cases and at the larger sizes then stand for it
        return "" if ran or larger_ran else TOO_LARGE

    def search(self, choices: dict[str, list], launches: list[Launch], max_runs: int = 600, jobs: int = 4,
               cost=None, seconds: float = 60.0) -> Outcome:
        """An assignment of one value per scalar from ``choices`` ({name: ordered values}) and a launch
        from ``launches`` that verifies at every case; element 0 of each list is the reading's draft,
        tried first. Then a coordinate search on the smaller case: each scalar in turn, then the
        launch, takes the alternative that gets the most output elements right (the earlier on a tie);
        where no single change gets more right, pairs of scalars change together (once). Among alternatives that get
        every element right, the one of least ``cost(scalars, launch, sizes)`` (a launch's threads at
        the task's sizes, then at the larger case's) is confirmed first. Stops when one verifies at every case, when no change gets
        more right, or after ``max_runs`` runs or ``seconds``."""
        deadline = time.monotonic() + seconds
        self.timeout_s = max(20.0, seconds)
        names = list(choices)
        cur = {n: choices[n][0] for n in names}
        lau = launches[0]
        small = self.cases[-1]              # the smaller size: most wrong assignments fail there already
        best, why = self.score(cur, lau, small)
        drafted_why = why or ""
        if best == 1.0:
            bad = self.confirmed(cur, lau)
            if not bad:
                return Outcome(True, cur, lau, self.runs, drafted_ok=True)
            drafted_why, best = bad, 0.999
        refuted: set = set()
        key = (lambda sc, la: (tuple(sorted((k, str(v)) for k, v in sc.items())), la))
        if cost is not None:            # and at the larger case's sizes, where the task's sizes tie
            at_task = cost
            cost = (lambda sc, la: (at_task(sc, la, None), at_task(sc, la, self._large.sizes if self._large else None)))
        else:
            cost = (lambda sc, la: 0)

        def step(pool, picks):
            """Score ``picks``; (True, pick) for one that verifies, (False, pick) for the best better
            one, None where none is better."""
            nonlocal best
            picks = [q for q in picks if q != (cur, lau) and key(*q) not in refuted]
            picks = picks[:max(0, max_runs - self.runs)] if time.monotonic() < deadline else []
            # a loaded machine runs the emulation slower: a run may take what is left of the time
            self.timeout_s = max(20.0, deadline - time.monotonic())
            scores = list(pool.map(lambda q: self.score(q[0], q[1], small)[0], picks))
            full = sorted((i for i, f in enumerate(scores) if f == 1.0), key=lambda i: (cost(*picks[i]), i))
            for i in full[:16]:
                if not self.confirmed(*picks[i]):
                    return True, picks[i]
                refuted.add(key(*picks[i]))
                scores[i] = 0.999
            top = max(range(len(picks)), key=lambda i: (scores[i], -i), default=None)
            if top is None or scores[top] <= best:
                return None
            best = scores[top]
            return False, picks[top]

        with ThreadPoolExecutor(jobs) as pool:
            paired = False
            for _ in range(6):
                moved = False
                for coord in names + ["launch"]:
                    if coord == "launch":
                        picks = [(cur, la) for la in launches]
                    else:
                        picks = [({**cur, coord: v}, lau) for v in choices[coord]]
                    got = step(pool, picks)
                    if got:
                        if got[0]:
                            return Outcome(True, got[1][0], got[1][1], self.runs, why=drafted_why)
                        cur, lau = got[1]
                        moved = True
                if not moved and not paired and len(names) > 1:
                    paired = True                   # stalled: two scalars at once
                    for x, y in itertools.combinations(names, 2):
                        picks = [({**cur, x: u, y: v}, lau) for u in choices[x][:8] for v in choices[y][:8]]
                        got = step(pool, picks)
                        if got:
                            if got[0]:
                                return Outcome(True, got[1][0], got[1][1], self.runs, why=drafted_why)
                            cur, lau = got[1]
                            moved = True
                            break
                if not moved or self.runs >= max_runs:
                    break
        return Outcome(False, {n: choices[n][0] for n in names}, launches[0], self.runs, why=drafted_why)


# ------------------------------------------------------------------------ the candidates

_BLOCKISH = re.compile(r"(?i)(block|thread|tile|bs|bm|bn|ts|tpb|warps?|nt)")


def size_exprs(sizes: list[str], out_dims: list[str]) -> list[str]:
    """Expressions a kernel's count or extent may be: the output's dimensions and their product first,
    then the products of its leading and of its trailing dimensions (a row's count and length), then
    every size, then products of two sizes, of all of them, of three."""
    out: list[str] = []

    def add(e):
        if e and e not in out:
            out.append(e)
    for d in out_dims:
        if d.isidentifier():
            add(d)
    if len(out_dims) > 1:
        add(" * ".join(out_dims))
    for i in range(2, len(out_dims)):
        add(" * ".join(out_dims[i - 1:]))
        add(" * ".join(out_dims[:len(out_dims) - i + 1]))
    for s in sizes:
        add(s)
    for a, b in itertools.combinations(sizes, 2):
        add(f"{a} * {b}")
    if len(sizes) > 2:
        add(" * ".join(sizes))
    if len(sizes) > 3:
        for c in itertools.combinations(sizes, 3):
            add(" * ".join(c))
    return out


def block_sizes(source: str, constants: dict) -> list[str]:
    """The 1-D block sizes worth trying: the file's constants that size a shared array or read as a
    block size, then 256, 32 (a warp), 128, 512, 1024."""
    out: list[str] = []
    for name, v in constants.items():
        if isinstance(v, int) and 32 <= v <= 1024 and (re.search(rf"__shared__[^;]*\[\s*{name}\s*[\]*+]", source)
                                                       or _BLOCKISH.search(name)):
            out.append(name)
    for n in ("256", "32", "128", "512", "1024"):
        out.append(n)
    return out


def tile_sizes(constants: dict) -> list[str]:
    """The sides of a 2-D block worth trying: the file's constants from 4 to 32, then 16, 32, 8."""
    out = [n for n, v in constants.items() if isinstance(v, int) and 4 <= v <= 32 and _BLOCKISH.search(n)]
    return out + [n for n in ("16", "32", "8") if n not in out]


def launches(source: str, constants: dict, sizes: list[str], out_dims: list[str], drafted: Launch,
             ints: list[str] = ()) -> list[Launch]:
    """Launches worth trying for a kernel, the reading's first: a grid in the axes the kernel reads
    (blockIdx.y, blockIdx.z only where it reads them), a block in the axes it reads threadIdx in, a
    block a row or column, a warp a row, and for dynamic shared memory a size in elements of the block
    or of each size."""
    uses = lambda pat: bool(re.search(pat, source))        # noqa: E731
    gy, gz = uses(r"blockIdx\s*\.\s*y"), uses(r"blockIdx\s*\.\s*z")
    ty = uses(r"threadIdx\s*\.\s*y")
    exprs = size_exprs(sizes, out_dims)
    # the extents in the kernel's own integer arguments first: a launch right for them is right for
    # whichever sizes they take
    extents = list(ints) + [f"{a} * {b}" for a, b in itertools.combinations(ints, 2)]
    extents = (extents + [e for e in exprs if e not in extents])[:max(8, len(extents))]
    warp = uses(r"__shfl|warpSize|\b32\b|& *31|% *32|/ *32|>> *5")
    dyn = DYN_SHARED.search(source)
    elem = 8 if dyn and re.search(r"double|long|int64|size_t", dyn.group(1)) else 4
    out: list[Launch] = [drafted]
    blocks1 = block_sizes(source, constants)
    grids: list[tuple[tuple, tuple]] = []
    singles = [e for e in extents if "*" not in e]            # a 2-D grid's sides: no products
    if ty:
        for t in tile_sizes(constants):
            for ex, ey in itertools.permutations(singles, 2):
                g = (f"cdiv({ex}, {t})", f"cdiv({ey}, {t})")
                grids.append((g + (("1",) if gz else ()), (t, t)))
    else:
        for b in blocks1[:4]:
            if not gy:
                for e in extents:
                    grids.append(((e,), (b,)))                                  # a block a row (or column)
                    grids.append(((f"cdiv({e}, {b})",), (b,)))                  # a thread an element
                    if warp:
                        grids.append(((f"cdiv({e}, ({b}) / 32)",), (b,)))       # a warp a row
            else:
                for ex, ey in itertools.permutations(singles, 2):
                    grids.append(((f"cdiv({ex}, {b})", ey), (b,)))
                    grids.append(((ex, ey), (b,)))
    seen = {(drafted.grid, drafted.block)}
    shared = ["0"]
    if dyn:
        shared = [f"{elem} * {e}" for e in exprs[:6]] + [f"{elem} * ({b})" for b in blocks1[:4]]
    order = [(drafted.block[0] if drafted.block else None)] + blocks1 + tile_sizes(constants)
    for g, b in grids:
        if (g, b) in seen:
            continue
        seen.add((g, b))
        for s in shared:
            out.append(Launch(tuple(g), tuple(b), s, "tested", order.index(b[0]) if b[0] in order else len(order)))
    if dyn and drafted.shared == "0":               # the reading's launch with each shared size
        out[1:1] = [Launch(drafted.grid, drafted.block, s, "tested") for s in shared]
    return out


"""Build: nvcc to a cubin, with ptxas resource usage, compiler logs, a timeout and a cache.

A compile error or a timeout is a status on the :class:`BuildResult`, never an exception;
only a missing nvcc is a :class:`EnvironmentProblem` (nothing can be built at all).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from loguru import logger

from .errors import EnvironmentProblem
from .procs import run_with_timeout, scrubbed_env

DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for one entry function."""
    registers: int = 0
    barriers: int = 0
    smem_static: int = 0        # bytes of static shared memory per block
    cmem: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


@dataclass
class BuildResult:
    status: str                                 # ok | compile_error | timeout
    key: str
    arch: str
    cubin_path: str | None = None
    log: str = ""                               # nvcc/ptxas stdout+stderr, kept verbatim
    resources: dict[str, Resources] = field(default_factory=dict)   # by symbol (mangled) name
    symbols: dict[str, str] = field(default_factory=dict)           # plain kernel name -> symbol
    wall_s: float = 0.0
    cached: bool = False
    command: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def instantiations(self, entry: str) -> list[str]:
        """The cubin's symbols whose plain name is ``entry``: none for a template the source never
        instantiates, several for a template instantiated more than once."""
        return [s for s in self.resources if plain_name(s) == entry]

    def entry_resources(self, entry: str) -> Resources | None:
        sym = self.symbols.get(entry)
        return self.resources.get(sym) if sym else None

    @property
    def warnings(self) -> list[str]:
        return [ln for ln in self.log.splitlines() if "warning" in ln.lower()]

    @property
    def errors(self) -> list[str]:
        """The log's error lines, without nvcc's closing count (``2 errors detected in the compilation of ...``)."""
        return [ln for ln in self.log.splitlines() if re.search(r"\berror\b", ln)
                and not re.match(r"\s*\d+ errors? detected in the compilation of", ln)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["resources"] = {k: asdict(v) for k, v in self.resources.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BuildResult":
        d = dict(d)
        d["resources"] = {k: Resources(**v) for k, v in d.get("resources", {}).items()}
        if d.get("status") == "ok":         # a cache entry written before ambiguous names were left out
            d["symbols"] = entry_symbols(d["resources"])
        return cls(**d)


def entry_problem(result: "BuildResult", entry: str, kernel=None) -> str | None:
    """Why a built cubin cannot run the spec's ``entry`` (None when it holds exactly one function of
    that name): a template the source never instantiates, or one instantiated several times.
    ``kernel``: the entry as the source parser saw it (its ``templated``), when known."""
    found = result.instantiations(entry)
    if len(found) == 1:
        return None
    if not found:
        if kernel is not None and getattr(kernel, "templated", False):
            return (f"the entry {entry!r} is a template that the source never instantiates, so the build holds no "
                    f"code for it; add an explicit instantiation such as `template __global__ void {entry}<float>(...);`.")
        return (f"the build holds no code for the entry {entry!r} (it has: "
                f"{', '.join(demangle(s) for s in result.resources) or 'none'}).")
    return (f"the template entry {entry!r} is instantiated {len(found)} times "
            f"({'; '.join(demangle(s) for s in found)}), and optiml runs one; keep a single instantiation.")


class Builder(Protocol):
    arch: str | None          # the architecture it builds for (None: it does not say)

    def build(self, source: str, flags: tuple[str, ...] = (), *, include_dir: Path | None = None,
              name: str = "kernel.cu") -> BuildResult: ...


# ------------------------------------------------------------------------------- ptxas parsing

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per-entry resources from ``-Xptxas -v`` output."""
    out: dict[str, Resources] = {}
    current: str | None = None
    vals: dict[str, int] = {}

    def flush():
        if current is not None:
            out[current] = Resources(**vals)

    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            flush()
            current, vals = m.group(1), {}
            continue
        if current is None:
            continue
        m = _PROPS.search(line)
        if m:
            vals.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _USED.search(line)
        if m:
            vals["registers"] = int(m.group(1))
            for pat, key in ((r"used (\d+) barriers", "barriers"), (r"(\d+) bytes smem", "smem_static"),
                             (r"(\d+) bytes cmem\[0\]", "cmem")):
                mm = re.search(pat, line)
                if mm:
                    vals[key] = int(mm.group(1))
    flush()
    return out


def entry_symbols(resources: dict[str, Resources]) -> dict[str, str]:
    """``{plain kernel name: symbol}`` for the names that stand for one symbol: a template kernel
    instantiated twice has no entry here (which one to run is not the builder's guess)."""
    by_name: dict[str, list[str]] = {}
    for s in resources:
        by_name.setdefault(plain_name(s), []).append(s)
    return {name: syms[0] for name, syms in by_name.items() if len(syms) == 1}


def plain_name(symbol: str) -> str:
    """The unqualified function name of a (possibly Itanium-mangled) kernel symbol."""
    if not symbol.startswith("_Z"):
        return symbol
    s = symbol[2:]
    nested = s.startswith("N")
    if nested:
        s = s[1:]
    name = symbol
    while s and s[0].isdigit():
        m = re.match(r"(\d+)", s)
        n = int(m.group(1))
        name = s[len(m.group(1)): len(m.group(1)) + n]
        s = s[len(m.group(1)) + n:]
        if not nested:
            break
        if s.startswith("I"):  # template args of a nested name: stop at the function name
            break
    return name


def demangle(symbol: str) -> str:
    """A symbol as C++ spells it (through cu++filt or c++filt), or the symbol itself."""
    for tool in ("cu++filt", "c++filt"):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            out = subprocess.run([exe, symbol], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out:
            return out
    return symbol


# ------------------------------------------------------------------------------- environment

@lru_cache(maxsize=1)
def nvcc_path() -> str:
    """``OPTIML_NVCC`` if set, else nvcc on PATH, else the usual CUDA location."""
    chosen = os.environ.get("OPTIML_NVCC")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise EnvironmentProblem(f"nvcc was not found at OPTIML_NVCC={chosen}; point it at the nvcc executable or unset it.")
        return chosen
    path = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if path is None:
        raise EnvironmentProblem("nvcc was not found on PATH; install the CUDA toolkit or add its bin/ folder to PATH.")
    return path


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def detect_arch() -> str:
    """``sm_XY`` of GPU 0 (through nvidia-smi), or the no-GPU UserError that tells the user to pass --arch."""
    from .gpus import compute_capability, no_gpu_error

    arch = compute_capability()
    if arch:
        return arch
    raise no_gpu_error()


def resolve_arch(arch: str | None) -> str:
    """``--arch`` normalised and known to this nvcc, or the GPU's own."""
    if not arch:
        return detect_arch()
    a = normalize_arch(arch)
    known = nvcc_archs()
    base = re.sub(r"[af]$", "", a)
    if known and base not in known:
        raise EnvironmentProblem(f"--arch {arch}: this nvcc ({nvcc_version()}) does not know the GPU architecture {a} "
                                 f"(it knows {', '.join(known)}).")
    return a


@lru_cache(maxsize=1)
def nvcc_archs() -> tuple[str, ...]:
    """The ``sm_XY`` architectures nvcc can build for (``nvcc --list-gpu-code``; () if it cannot say)."""
    try:
        out = subprocess.run([nvcc_path(), "--list-gpu-code"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted(set(re.findall(r"\bsm_\d+\b", out)), key=lambda a: int(a[3:])))


def normalize_arch(arch: str) -> str:
    a = arch.strip().lower()
    if re.fullmatch(r"\d+\.\d+", a):
        a = "sm_" + a.replace(".", "")
    elif re.fullmatch(r"\d+a?", a):
        a = "sm_" + a
    if not re.fullmatch(r"sm_\d+[af]?", a):
        raise EnvironmentProblem(f"--arch {arch!r} is not a GPU architecture such as sm_90 or 9.0.")
    return a


def default_cache_dir() -> Path:
    env = os.environ.get("OPTIML_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "optiml" / "build"


def _ensure_cache_dir(path: Path) -> None:
    """Create the build cache folder, or an EnvironmentProblem naming it and $OPTIML_CACHE_DIR."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        usable = path.is_dir() and os.access(path, os.W_OK | os.X_OK)
        why = "not writable"
    except OSError as e:        # a file in the way (/dev/null), no permission, a read-only file system
        usable, why = False, e.strerror or str(e)
    if not usable:
        raise EnvironmentProblem(f"the build cache folder {path} cannot be created or written ({why}); "
                                 f"set OPTIML_CACHE_DIR to a writable folder.")


# ------------------------------------------------------------------------------- the builder

def build_key(source: str, flags: tuple[str, ...], arch: str, nvcc: str, include_dir: Path | None = None,
              headers: dict[str, bytes] | None = None) -> str:
    """A build's cache key: source, flags, arch, nvcc version, include folder, and the contents of
    ``headers`` when given (``{name: bytes}``; None for a header that is not there)."""
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), arch, nvcc, str(include_dir or "")):
        h.update(part.encode())
        h.update(b"\1")
    for name in sorted(headers or {}):
        data = headers[name]
        h.update(name.encode() + b"\0" + (hashlib.sha256(data).digest() if data is not None else b"\2missing"))
    return h.hexdigest()[:32]


def read_cached(entry: Path) -> BuildResult | None:
    """The cached BuildResult in cache folder ``entry``: a failure, or a success whose cubin is
    still there; None when absent or damaged."""
    meta = entry / "build.json"
    if not meta.is_file():
        return None
    try:
        result = BuildResult.from_dict(json.loads(meta.read_text()))
    except (ValueError, TypeError, KeyError):
        logger.warning("ignoring a damaged build cache entry {}", entry)
        return None
    if not result.ok or (result.cubin_path and Path(result.cubin_path).is_file()):
        result.cached = True
        return result
    return None


class KeyLocks:
    """One lock per key (a build of one key at a time across threads)."""

    def __init__(self):
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
MAX_HEADERS = 2000
_warned_truncated: list[bool] = []


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except OSError:       # a name too long, a folder that cannot be searched: not there for nvcc either
        return False


def included_headers(source: str, include_dirs: list[Path], pre_includes: tuple[str, ...] = (),
                     found_as: dict[str, str] | None = None) -> dict[str, bytes | None]:
    """The files ``source`` includes from ``include_dirs`` (in nvcc's search order), transitively:
    ``{path: contents}``, and ``{"missing:<name>": None}`` for a name found in none of them (a
    system header, or one not written yet: its appearing changes the answer). A header's own
    folder is searched first for its quoted includes; ``pre_includes`` (``-include``) come first.
    Every ``#include`` line counts, even under an ``#if`` (more, never fewer); an include named by
    a macro is not followed. Toolkit headers are not listed: the nvcc version stands for them.
    ``found_as``, when given, collects ``{path as nvcc names it (links not followed): key in the
    answer}`` for every lookup, so a header reached through a link can be shipped by that name."""
    out: dict[str, bytes | None] = {}
    todo: list[tuple[str, str, Path | None]] = [(q, n, None) for q, n in _INCLUDE.findall(source)]
    todo += [('"', n, None) for n in reversed(pre_includes)]
    while todo:
        if len(out) >= MAX_HEADERS:
            if not _warned_truncated:       # once a process, not once a build
                _warned_truncated.append(True)
                logger.warning("more than {} included files: the build cache key covers the first {} only",
                               MAX_HEADERS, MAX_HEADERS)
            break
        quote, name, here = todo.pop()
        dirs = ([here] if quote == '"' and here is not None else []) + list(include_dirs)
        found = next((d / name for d in dirs if _is_file(d / name)), None)
        if found is None:
            out.setdefault(f"missing:{name}", None)
            continue
        path = str(found.resolve())
        if found_as is not None:
            found_as.setdefault(os.path.abspath(found), path)
        if path in out:
            continue
        try:
            data = found.read_bytes()
        except OSError:
            out[path] = None
            continue
        out[path] = data
        todo += [(q, n, found.parent) for q, n in reversed(_INCLUDE.findall(data.decode("utf-8", "replace")))]
    return out


def _flag_values(flags: tuple[str, ...], names: tuple[str, ...]) -> list[str]:
    """The values of nvcc options ``names`` in ``flags`` (``-I x``, ``-Ix``, ``--include-path=x``),
    comma lists split as nvcc splits them."""
    values: list[str] = []
    it = iter(flags)
    for f in it:
        for n in names:
            if f == n:
                values += (next(it, "") or "").split(",")
            elif n.startswith("--") and f.startswith(n + "="):
                values += f[len(n) + 1:].split(",")
            elif not n.startswith("--") and f.startswith(n) and len(f) > len(n):
                values += f[len(n):].split(",")
            else:
                continue
            break
    return [v for v in values if v]


def _include_dirs(flags: tuple[str, ...], include_dir: Path | None) -> list[Path]:
    """The folders nvcc searches for includes beyond the toolkit, in its order: the flags' -I
    folders, then ``include_dir`` (NvccBuilder passes it last), then -isystem folders. A relative
    folder is left out: nvcc runs in the cache entry, where it names nothing of the user's."""
    dirs = [Path(v) for v in _flag_values(flags, ("-I", "--include-path"))]
    dirs += [Path(include_dir)] if include_dir is not None else []
    dirs += [Path(v) for v in _flag_values(flags, ("-isystem", "--system-include"))]
    return [d for d in dirs if d.is_absolute()]


def header_dependencies(source: str, flags: tuple[str, ...], include_dir: Path | None,
                        found_as: dict[str, str] | None = None) -> dict[str, bytes | None]:
    """What a build of ``source`` with ``flags`` and ``include_dir`` reads besides the toolkit
    (:func:`included_headers` over nvcc's include folders and ``-include`` files)."""
    flags = tuple(flags)
    return included_headers(source, _include_dirs(flags, include_dir),
                            tuple(_flag_values(flags, ("-include", "--pre-include"))), found_as)


class NvccBuilder:
    """nvcc -cubin for one architecture, cached by (source, flags, arch, nvcc version, and the
    contents of the headers the source includes from its folder or -I folders)."""

    def __init__(self, arch: str, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.arch = normalize_arch(arch)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        _ensure_cache_dir(self.cache_dir)
        self.timeout_s = timeout_s
        self._locks = KeyLocks()     # one build of a key at a time (builds run in threads)

    def key(self, source: str, flags: tuple[str, ...], include_dir: Path | None = None) -> str:
        include_dir = Path(include_dir).absolute() if include_dir is not None else None
        return build_key(source, flags, self.arch, nvcc_version(), include_dir,
                         header_dependencies(source, flags, include_dir))

    def build(self, source: str, flags: tuple[str, ...] = (), *, include_dir: Path | None = None,
              name: str = "kernel.cu") -> BuildResult:
        """Compile ``source``; ``name`` is the file name compiler messages will show."""
        flags = tuple(flags)
        include_dir = Path(include_dir).absolute() if include_dir is not None else None   # nvcc runs in the cache entry
        key = self.key(source, flags, include_dir)
        with self._locks(key):
            return self._build(key, source, flags, include_dir, name)

    def _build(self, key: str, source: str, flags: tuple[str, ...], include_dir: Path | None, name: str) -> BuildResult:
        d = self.cache_dir / key
        meta = d / "build.json"
        hit = read_cached(d)
        if hit is not None:
            return hit
        src = d / (Path(name).name if name.endswith(".cu") else "kernel.cu")
        # this process and thread's own names, each file then moved into place: two builders (two
        # processes, or two evaluations with builders of their own) building one key must not mix files
        mine = f"{os.getpid()}.{threading.get_ident()}"
        try:
            d.mkdir(parents=True, exist_ok=True)
            staged = d / f".{src.name}.{mine}"
            staged.write_text(source)
            os.replace(staged, src)          # whole, even where another builder writes it too
        except OSError as e:
            raise EnvironmentProblem(f"the build cache folder {self.cache_dir} cannot be written ({e.strerror or e}); "
                                     f"set OPTIML_CACHE_DIR to a writable folder.") from None
        cubin = d / "kernel.cubin"
        # a candidate that names its own architecture (a template for sm_90a) is built for that one only
        from .gpus import flags_name_arch

        cmd = [nvcc_path(), "-cubin", *([] if flags_name_arch(flags) else [f"-arch={self.arch}"]), "-Xptxas", "-v",
               *flags]
        if include_dir is not None:
            cmd += ["-I", str(include_dir)]
        out = d / f"kernel.{mine}.cubin"
        cmd += ["-o", str(out), src.name]
        t0 = time.perf_counter()
        status, log = _run_with_timeout(cmd, self.timeout_s, cwd=d)
        wall = time.perf_counter() - t0
        if status == "ok" and out.is_file():
            os.replace(out, cubin)
        elif status == "ok":
            status = "compile_error"
        shown = [str(cubin) if c == str(out) else c for c in cmd]       # the command as it reads for the cache entry
        result = BuildResult(status=status, key=key, arch=self.arch, log=log, wall_s=wall, command=shown,
                             cubin_path=str(cubin) if status == "ok" else None)
        if status == "ok":
            result.resources = parse_ptxas(log)
            result.symbols = entry_symbols(result.resources)
        if status != "timeout":  # a timeout may be load-dependent: do not cache it
            tmp = meta.with_name(f"build.{mine}.tmp")
            tmp.write_text(json.dumps(result.to_dict()))
            os.replace(tmp, meta)
        logger.debug("nvcc {} in {:.2f}s: {}", key, wall, status)
        return result


def _run_with_timeout(cmd: list[str], timeout_s: float, cwd: Path) -> tuple[str, str]:
    """Run nvcc; a timeout kills its whole process group. Returns (status, log)."""
    code, out = run_with_timeout(cmd, timeout_s, cwd=cwd, env=scrubbed_env())
    if code is None:
        return "timeout", out[-100_000:] + f"\nnvcc did not finish within {timeout_s:g} s and was stopped."
    if len(out) > 1_000_000:
        out = out[:500_000] + "\n[... compiler output truncated ...]\n" + out[-200_000:]
    return ("ok" if code == 0 else "compile_error"), out


_FILE_MESSAGE = re.compile(r"^(?P<file>[^\s(][^()]*)\((?P<line>\d+)\): ")


def own_log(log: str, name: str) -> str:
    """``log`` with only the messages about the candidate's own file ``name``: a message about
    another file (one ``FILE(N): ...`` line and the source lines nvcc echoes under it) is left out,
    since nvcc echoes that file's lines and the log is stored and shown to the model."""
    own = Path(name).name
    out, keep, dropped = [], True, 0
    for line in log.splitlines():
        m = _FILE_MESSAGE.match(line)
        if m:
            keep = Path(m.group("file")).name == own
            dropped += not keep
        if keep:
            out.append(line)
        elif not line.strip():
            keep = True           # a blank line ends nvcc's message block
    if dropped:
        out.append(f"({dropped} message(s) about other files left out)")
    return "\n".join(out) + ("\n" if log.endswith("\n") else "")

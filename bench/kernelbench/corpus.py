"""What the KernelBench corpora's check scripts share (bench/kernelbench/level1, level2): a corpus
folder's task map, its generated references and the templates optiml offers its kernels.

A corpus folder holds tasks/ (KernelBench task files), k/NAME.cu with its spec k/NAME.toml, and
map.txt (a line `NAME TASK` for each kernel). A spec's reference k/NAME_ref.py is generated as
`optiml init --kernelbench` writes it; a spec naming another file keeps a reference written by hand.
"""
import multiprocessing
import os
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def tasks(corpus: Path) -> dict:
    """{kernel name: its KernelBench task file}, from the corpus's map.txt."""
    out = {}
    for line in (corpus / "map.txt").read_text().splitlines():
        if line.strip():
            name, task = line.split()
            out[name] = corpus / "tasks" / f"{task}.py"
    return out


def selected(names, name: str, exact: bool = False) -> bool:
    """Whether NAME is asked for: every kernel without names, else those named (``exact``) or
    containing one of the names."""
    return not names or (name in names if exact else any(n in name for n in names))


def write_references(corpus: Path, names=(), exact: bool = False) -> list:
    """Write the reference k/NAME_ref.py that NAME's spec names, as `optiml init --kernelbench` writes
    it for NAME's kernel and task, where it is missing or differs (atomically: tests may ask for it
    from several processes at once). Returns the files written. A spec naming another file (a
    reference written by hand) is left alone; NAME.gpu.toml names the same file as NAME.toml. A
    SpecError (no PyTorch, a task init cannot run) is raised as the draft raises it."""
    from optiml.draft.kernelbench import draft_kernelbench
    written = []
    for name, task in tasks(corpus).items():
        if not selected(names, name, exact):
            continue
        spec = corpus / "k" / f"{name}.toml"
        data = tomllib.loads(spec.read_text())
        ref_file = data["reference"]["torch"].split(":")[0]
        if ref_file != f"{name}_ref.py":
            continue
        cu = spec.with_suffix(".cu")
        _, text = draft_kernelbench(task, cu.read_text(), cu, data["kernel"]["entry"], spec, test=False)
        target = spec.with_name(ref_file)
        if target.is_file() and target.read_text() == text:
            continue
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        written.append(target)
    return written


def offers(corpus: Path, names=(), exact: bool = False) -> dict:
    """{kernel name: (template name or None, the candidate's source or the reason)}."""
    from optiml.edits.templates import template_transforms
    from optiml.spec import load_spec
    write_references(corpus, names, exact)
    out = {}
    for name in sorted(tasks(corpus)):
        if selected(names, name, exact):
            cu = corpus / "k" / f"{name}.cu"
            src = cu.read_text()
            spec = load_spec(cu.with_suffix(".toml"), cu, kernel_source=src)
            made, why = template_transforms(src, spec.entry, spec)
            out[name] = (made[0].edit.split()[1], made[0].source) if made else (None, why)
    return out


def _fields(data: dict) -> dict:
    """The fields of a spec that say what the kernel computes and how it runs, flattened."""
    out = {"sizes.timing": data["sizes"]["timing"], "sizes.verify": data["sizes"]["verify"]}
    for a in data["args"]:
        for key in ("dtype", "role", "shape", "value"):
            if key in a:
                out[f"{a['name']}.{key}"] = a[key]
    for key in ("grid", "block", "shared_mem"):
        v = data["launch"].get(key)
        out[f"launch.{key}"] = [str(x) for x in v] if isinstance(v, list) else str(v)
    return out


def draft_outcome(corpus: Path, name: str, task: Path, test: bool = True) -> dict:
    """What `optiml init --kernelbench` makes of NAME against its task: {"todo": the draft's TODO lines,
    "diff": [(field, draft's, hand-checked)], "verified": whether init verified it on the CPU
    emulation} or {"failed": the message}. With ``test`` (init as a user runs it), writes the draft as
    k/NAME.draft.toml (no check at the timing size) with its reference k/NAME_draft_ref.py, for --gpu;
    a reading-only draft (``test`` False, the tests' regression check) writes nothing."""
    from optiml.draft.kernelbench import draft_kernelbench
    from optiml.errors import UserError
    cu = corpus / "k" / f"{name}.cu"
    hand_data = tomllib.loads(cu.with_suffix(".toml").read_text())
    draft = cu.with_suffix(".draft.toml")
    try:
        text, ref = draft_kernelbench(task, cu.read_text(), cu, hand_data["kernel"]["entry"], draft, test=test)
    except UserError as e:
        return {"failed": str(e).replace(str(corpus) + "/", "")}
    if test:    # the draft as init wrote it, beside the kernel (its reference under its own name), for --gpu
        ref_name = f"{name}_draft_ref.py"
        draft.write_text(text.replace(f'"{name}_ref.py:', f'"{ref_name}:') + "\n[verify]\ntiming_size = false\n")
        cu.with_name(ref_name).write_text(ref)
    drafted, hand = _fields(tomllib.loads(text)), _fields(hand_data)
    diff = [(k, drafted.get(k), hand.get(k)) for k in list(hand) + [k for k in drafted if k not in hand]
            if drafted.get(k) != hand.get(k)]
    verified = "verified on the CPU emulation" in text or "chosen by testing on the CPU emulation" in text
    return {"todo": sum("TODO" in line for line in text.splitlines()), "diff": diff, "text": text,
            "verified": verified and "# TODO: how the kernel maps" not in text}


def _draft_job(job):
    corpus, name, task, test = job
    return name, draft_outcome(corpus, name, task, test)


def draft_outcomes(corpus: Path, names: list, task_of: dict, jobs: int = 1, test: bool = True):
    """draft_outcome for each of ``names``, ``jobs`` kernels at a time in their own processes (each
    draft's testing compiles and runs its kernel on the CPU); yields (name, outcome) in ``names``' order."""
    work = [(corpus, name, task_of[name], test) for name in names]
    if jobs <= 1:
        yield from map(_draft_job, work)
        return
    # spawned, not forked: the parent has PyTorch's threads, which a forked child can deadlock on
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield from ex.map(_draft_job, work)

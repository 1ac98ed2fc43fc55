"""Candidate hygiene: a proposal may not include what the seed does not, nvcc's messages about
other files never reach the stored log, and no credential reaches nvcc, ncu or a GPU child."""
import os
import random

import pytest

from optiml.build import NvccBuilder, own_log
from optiml.edits.hygiene import IncludeGuard, include_violation
from optiml.edits.types import NodeView, Proposal
from optiml.procs import child_env, scrubbed_env

SEED = '#include <cstdint>\n#include "tile.h"\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'


@pytest.mark.parametrize("added", ["", "#include <cuda_fp16.h>\n", "#include <cstdint>\n", '#include "tile.h"\n',
                                   "#include <cuda/std/atomic>\n", "#include <cooperative_groups.h>\n"])
def test_what_the_seed_has_and_system_headers_are_allowed(added):
    assert include_violation(SEED, added + SEED) is None


@pytest.mark.parametrize("added, words", [
    ('#include "/etc/passwd"\n', "the seed kernel does not have"),
    ('#include "other.h"\n', "the seed kernel does not have"),
    ("#include </etc/passwd>\n", "absolute paths"),
    ("#include <../../etc/passwd>\n", "absolute paths"),
    ("#include <cuda/../../../etc/passwd>\n", "absolute paths"),
    ("#include <notes.txt>\n", "not a system header"),
    ("#include <>\n", "#include <>, which is not a system header"),       # an empty name is no header either
    ('#include ""\n', "the seed kernel does not have"),
    ('  #  include   "/dev/stdin" // a comment\n', "the seed kernel does not have"),
    ('#include \\\n "/etc/shadow"\n', "the seed kernel does not have"),
    ('#define F "/etc/passwd"\n#include F\n', "the seed kernel does not have"),
    ('#define HEADER "/etc/passwd"\n#include HEADER\n', "the seed kernel does not have"),
    ('#include_next "/etc/passwd"\n', "the seed kernel does not have"),
])
def test_an_added_include_is_refused_with_one_sentence(added, words):
    why = include_violation(SEED, SEED + added)
    assert why and words in why and why.endswith(".") and "\n" not in why


def test_an_angle_bracket_name_of_a_file_in_the_kernels_folder_is_refused(tmp_path):
    (tmp_path / "secrets.h").write_text("key\n")
    assert "not a system header" in include_violation(SEED, SEED + "#include <secrets.h>\n", [tmp_path])
    assert include_violation(SEED, SEED + "#include <secrets.h>\n") is None        # elsewhere: a system header


class ScriptedProposer:
    name = "scripted"

    def propose(self, node, k, rng):
        return [Proposal(node.source + '#include "/etc/passwd"\n', (), "leak", "r"),
                Proposal(node.source.replace("1.0f", "2.0f"), (), "two", "r"),
                Proposal(node.source, (), "broken", "r", error="the anchor is not in the source")]


def test_the_guard_turns_a_leaking_proposal_into_a_failed_edit():
    got = IncludeGuard(ScriptedProposer(), SEED).propose(NodeView(source=SEED, flags=()), 3, random.Random(0))
    assert [p.edit for p in got] == ["leak", "two", "broken"]
    assert "does not have" in got[0].error and got[1].error is None
    assert got[2].error == "the anchor is not in the source"                     # its own reason kept


def test_a_failed_edit_is_stored_as_edit_failed_and_never_built():
    from optiml.search import MCTS, SearchConfig

    built = []

    class FakeEvaluator:
        def evaluate(self, source, flags):
            built.append(source)
            return {"status": "ok", "median_ms": 1.0}

    m = MCTS(SEED, FakeEvaluator(), IncludeGuard(ScriptedProposer(), SEED), config=SearchConfig(budget=3))
    m.run()
    assert not any("/etc/passwd" in s for s in built)
    assert any(a.edit == "leak" and a.status == "edit_failed" for a in m.root.attempts())


def test_nvcc_messages_about_another_file_are_left_out_of_the_log(tmp_path):
    host = tmp_path / "host.txt"
    host.write_text("secret line one\n")
    source = f'__global__ void k(float* x) {{ x[threadIdx.x] = nope; }}\n#include "{host}"\n'
    r = NvccBuilder("sm_90", cache_dir=tmp_path / "cache").build(source, name="cand.cu")
    assert r.status == "compile_error" and "secret line one" in r.log       # what nvcc itself printed
    log = own_log(r.log, "cand.cu")
    assert "secret" not in log and "host.txt" not in log
    assert 'identifier "nope" is undefined' in log and "about other files left out" in log


def test_the_runner_stores_only_the_candidates_own_messages(tmp_path):
    from optiml.runner import Candidate, Preparer
    from tests.test_spec import KERNEL, load

    host = tmp_path / "host.txt"
    host.write_text("secret line one\n")
    spec = load(tmp_path)
    prep = Preparer(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    kb, ev = prep.build(Candidate(f'#include "{host}"\n' + KERNEL, name="cand.cu"))
    assert kb is None and ev.status == "compile_error"
    assert "secret" not in ev.build.log and "secret" not in ev.message


def test_credentials_never_reach_a_child(monkeypatch):
    for name in ("OPTIML_LLM_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_PASSWORD",
                 "GITHUB_AUTH"):
        monkeypatch.setenv(name, "s3cr3t")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for env in (scrubbed_env(), child_env()):
        assert "s3cr3t" not in env.values() and env["CUDA_VISIBLE_DEVICES"] == "0" and "PATH" in env


def test_a_child_finds_this_same_optiml_first_on_its_path(monkeypatch):
    import optiml

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    first, rest = child_env()["PYTHONPATH"].split(os.pathsep, 1)
    assert os.path.join(first, "optiml", "__init__.py") == optiml.__file__ and rest == "/elsewhere"


def test_nvcc_runs_without_credentials(tmp_path, monkeypatch):
    import optiml.build as build

    seen = {}

    def fake_run(cmd, timeout_s, cwd=None, env=None):
        seen["env"] = env
        return 1, "error: stopped"
    monkeypatch.setattr(build, "run_with_timeout", fake_run)
    monkeypatch.setenv("OPENAI_API_KEY", "s3cr3t")
    r = NvccBuilder("sm_90", cache_dir=tmp_path / "cache").build(SEED.replace('#include "tile.h"\n', ""))
    assert r.status == "compile_error" and "PATH" in seen["env"] and "OPENAI_API_KEY" not in seen["env"]
    assert os.environ["OPENAI_API_KEY"] == "s3cr3t"                         # ours is untouched

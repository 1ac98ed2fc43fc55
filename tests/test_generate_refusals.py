"""`optiml generate`'s one sentences for input a user can fix, before anything runs: a spec that is
missing, unreadable or not TOML, one with a [tune] table, bad --sanitize/--proposer/--budget values,
no SPEC, and a --resume of a run generate did not start or whose spec is gone or changed. FAKE GPU
parts (tests/test_generate.py); none of it is GPU behaviour."""
import pytest
from click.testing import CliRunner

from optiml.app.generate import GenerateOptions, load_generate_spec, run_generate
from optiml.cli import main
from optiml.errors import SpecError, UserError
from tests.conftest import RUNNER_DEADLINE
from tests.test_generate import SPEC, fake_gpu, spec_file  # noqa: F401 (a fixture)

pytestmark = RUNNER_DEADLINE


def test_a_spec_that_is_missing_unreadable_or_not_toml_is_one_sentence(tmp_path):
    with pytest.raises(SpecError) as e:
        load_generate_spec(tmp_path / "none.toml")
    assert str(e.value) == f"{tmp_path / 'none.toml'}: spec file not found."
    with pytest.raises(SpecError) as e:
        load_generate_spec(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: cannot read the spec (")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sizes\ntiming = 1\n")
    with pytest.raises(SpecError) as e:
        load_generate_spec(bad)
    assert str(e.value).startswith(f"{bad}: not valid TOML (") and "\n" not in str(e.value)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"# caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin\.toml: cannot read the spec \("):
        load_generate_spec(latin)


def test_a_spec_with_a_tune_table_is_refused(tmp_path):
    spec = spec_file(tmp_path, SPEC + '\n[tune]\nBLOCK = [64, 128]\n')
    with pytest.raises(UserError) as e:
        load_generate_spec(spec)
    assert str(e.value) == f"{spec}: [tune] names a given kernel's parameters; remove it for optiml generate."


@pytest.mark.parametrize("change, message", [
    (dict(sanitize="always"), "--sanitize takes best, all or off, not 'always'."),
    (dict(proposer="random"), "--proposer takes rules, llm or mixed, not 'random'."),
    (dict(budget=0), "--budget must be at least 1, not 0."),
    (dict(parallel=0), "--parallel must be at least 1, not 0."),
    (dict(build_jobs=-1), "--jobs must be at least 1, not -1."),
    (dict(strategies=13), "--strategies must be between 1 and 12, not 13."),
    (dict(spec=None), "give the SPEC of the kernel to generate (a task spec with no kernel), or --resume RUN."),
])
def test_bad_options_are_one_sentence_and_store_nothing(tmp_path, fake_gpu, change, message):
    opts = GenerateOptions(**{"spec": spec_file(tmp_path), "describe": "scale x", "db": tmp_path / "t.db",
                              "arch": "sm_90", **change})
    with pytest.raises(UserError) as e:
        run_generate(opts)
    assert str(e.value) == message
    assert not (tmp_path / "t.db").exists()


def test_resuming_what_generate_cannot_continue_is_one_sentence(tmp_path, fake_gpu):
    from optiml.traces.store import TraceStore

    spec = spec_file(tmp_path)
    db = tmp_path / "t.db"
    with TraceStore(db) as store:
        other = store.start_run("scale", spec_toml=SPEC, kernel_source="// k\n", config={"search": "mcts"})
        gen = store.start_run("scale", spec_toml=SPEC, kernel_source="// k\n",
                              config={"generate": True, "describe": "scale x", "spec": str(spec.resolve())})
    resume = lambda run, **kw: run_generate(GenerateOptions(resume=run, db=db, arch="sm_90", **kw))  # noqa: E731
    with pytest.raises(UserError) as e:
        resume(other)
    assert str(e.value) == (f"run {other} was not started by optiml generate; continue it with "
                            f"optiml optimize --resume {other}.")
    spec.write_text(SPEC + "\n# edited\n")
    with pytest.raises(UserError) as e:
        resume(gen)
    assert str(e.value) == f"{spec} changed since run {gen} started; its results would not compare (start a new run)."
    spec.unlink()
    with pytest.raises(UserError) as e:
        resume(gen)
    assert str(e.value) == f"run {gen}'s spec {spec.resolve()} is gone; pass the same spec as SPEC."


def test_the_cli_says_a_missing_spec_in_one_line(tmp_path):
    from tests.conftest import assert_one_sentence_error

    r = CliRunner().invoke(main, ["generate", str(tmp_path / "none.toml"), "--describe", "x", "--llm-model", "m",
                                  "--db", str(tmp_path / "t.db")])
    assert_one_sentence_error(r, "none.toml: spec file not found.")

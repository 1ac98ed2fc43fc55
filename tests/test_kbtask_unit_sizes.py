"""A KernelBench task's sizes (optiml/draft/kbtask.py): a module-level size of 1 (a batch of one)
is a size like any other positive literal integer, listed and settable when the task is run anew."""
from optiml.draft.kbtask import load_task, task_sizes

TASK = "batch_size = 1\ndim = 64\nshape = (batch_size, dim)\nzero = 0\n"


def test_a_size_of_one_is_among_the_tasks_sizes(tmp_path):
    t = tmp_path / "unit_task.py"
    t.write_text(TASK)
    assert task_sizes(t) == {"batch_size": 1, "dim": 64}


def test_a_size_of_one_is_replaced_when_the_task_runs_at_other_sizes(tmp_path):
    t = tmp_path / "unit_task_run.py"
    t.write_text(TASK)
    mod = load_task(t, {"batch_size": 3, "dim": 5})
    assert (mod.batch_size, mod.dim, mod.shape) == (3, 5, (3, 5))

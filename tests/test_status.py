"""The closed set of outcomes: each status's text (what records, messages and the CLI show) and
its category (what the reward, the search and the exports reason about)."""
from optiml.status import EVALUATION_STATUSES, Category, Status, category, of


def test_a_status_and_a_category_read_as_their_text():
    for s in Status:
        assert str(s) == s.value and f"{s}" == s.value
    for c in Category:
        assert str(c) == c.value
    assert f"status {Status.WORKER_LOST}, {Category.INFRASTRUCTURE}" == "status worker_lost, infrastructure"


def test_each_status_has_its_category_and_an_unknown_one_is_optimls_failure():
    assert Status.UNSAFE.category is Category.WRONG and Status.PENDING.category is Category.UNFINISHED
    assert category("ok") is Category.OK and category("compile_error") is Category.BUILD_FAILURE
    assert category("timeout") is Category.CRASH and category(Status.REFUSED) is Category.NOT_EVALUATED
    assert category("no_such_status") is Category.INFRASTRUCTURE and category(None) is Category.INFRASTRUCTURE


def test_the_statuses_of_a_category():
    assert of(Category.WRONG) == {Status.WRONG_OUTPUT, Status.UNSAFE, Status.BEYOND_BOUND}
    assert of(Category.UNFINISHED) == {Status.PENDING, Status.RUNNING}
    assert set().union(*(of(c) for c in Category)) == set(Status)


def test_what_an_evaluation_can_end_with():
    """Everything but the unfinished and the never-evaluated, in the enum's order."""
    assert EVALUATION_STATUSES[0] is Status.OK and EVALUATION_STATUSES[-1] is Status.WORKER_LOST
    assert set(EVALUATION_STATUSES) == set(Status) - {Status.PENDING, Status.RUNNING, Status.EDIT_FAILED,
                                                      Status.DUPLICATE, Status.REFUSED}

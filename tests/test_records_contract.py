"""One contract, two record keepers (as optuna runs one suite over its storages): the in-memory
RecordingObserver and the SQLite trace store (StoreObserver, read back with stored_records) must
give identical records for the same scripted search, and a search rebuilt from either goes on
identically. Fakes: the replay evaluator and scripted proposer of test_search_mcts."""
import pytest

from optiml.app.records import StoreObserver, stored_records
from optiml.search import MCTS, RecordingObserver, SearchConfig
from optiml.traces.store import TraceStore
from tests.conftest import ROOT as ROOT_DIR
from tests.test_search_mcts import ROOT, ReplayEvaluator, ScriptedProposer


class MemoryKeeper:
    name = "memory"

    def __init__(self, tmp_path):
        self.observer = RecordingObserver()

    def records(self):
        return self.observer.records


class SqliteKeeper:
    name = "sqlite"

    def __init__(self, tmp_path):
        self.store = TraceStore(tmp_path / "contract.db")
        self.run = self.store.start_run("toy")
        self.observer = StoreObserver(self.store, self.run)

    def records(self):
        return stored_records(self.store, self.run)


def renumbered(records):
    """Records with node ids as creation order (the store numbers them its own way)."""
    ids = {r["id"]: i for i, r in enumerate(r for r in records if r["id"] is not None)}
    out = []
    for r in records:
        r = dict(r)
        r["id"] = ids.get(r["id"]) if r["id"] is not None else None
        r["parent"] = ids.get(r["parent"]) if r["parent"] is not None else None
        out.append(r)
    return out


def scripted_search(keeper, budget, seed):
    m = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=budget, seed=seed),
             observer=keeper.observer)
    m.run()
    return m


@pytest.mark.parametrize("seed", [0, 3])
def test_memory_and_sqlite_keep_identical_records(tmp_path, seed):
    memory, sqlite = MemoryKeeper(tmp_path), SqliteKeeper(tmp_path)
    scripted_search(memory, 25, seed)
    scripted_search(sqlite, 25, seed)
    mem, sql = renumbered(memory.records()), renumbered(sqlite.records())
    assert len(mem) > 26 and any(r["id"] is None for r in mem)         # nodes and attempts both
    assert [r["status"] for r in mem] == [r["status"] for r in sql]
    assert mem == sql


@pytest.mark.parametrize("keeper", [MemoryKeeper, SqliteKeeper], ids=lambda k: k.name)
def test_a_search_rebuilt_from_either_goes_on_as_one_that_never_stopped(tmp_path, keeper):
    once = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=30, seed=1))
    once.run()
    k = keeper(tmp_path)
    scripted_search(k, 15, 1)
    again = MCTS.from_records(k.records(), ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=30, seed=1))
    again.run()
    assert again.signature() == once.signature()
    assert [n.visits for n in again.nodes] == [n.visits for n in once.nodes]


@pytest.mark.parametrize("seed", [0, 3])
def test_the_stored_visits_and_values_agree_with_the_search_after_every_evaluation(tmp_path, seed):
    """The store writes every figure an evaluation changes (the node and all its ancestors), so the
    stored root shows the search's visits, not the one it had when it was itself evaluated."""
    sqlite = SqliteKeeper(tmp_path)
    m = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=12, seed=seed),
             observer=sqlite.observer)
    checked = []

    class Checker:
        def on_node_evaluated(self, node):
            stored = {n.id: n for n in sqlite.store.nodes(sqlite.run)}
            for mine in m.nodes:
                if mine.id in sqlite.observer.ids:
                    row = stored[sqlite.observer.ids[mine.id]]
                    assert (row.visits, round(row.value_sum, 9)) == (mine.visits, round(mine.value_sum, 9)), mine
            checked.append(node.id)

    inner = sqlite.observer.on_node_evaluated
    sqlite.observer.on_node_evaluated = lambda node: (inner(node), Checker().on_node_evaluated(node))
    m.run()
    assert len(checked) == 13 and m.root.visits == 13
    root_row = next(n for n in sqlite.store.nodes(sqlite.run) if n.parent_id is None)
    assert root_row.visits == 13


def test_the_derived_figures_of_a_recorded_run_are_the_searchs(tmp_path):
    """A run recorded on an H200 before the store kept ancestors' figures: its root was stored with
    1 visit; the figures derived from the stored rewards (what `show --node --raw` prints) are the
    replayed search's, node by node."""
    import shutil

    from optiml.app.records import stored_records
    from optiml.traces.report import format_node_raw

    db = tmp_path / "r.db"
    shutil.copy(ROOT_DIR / "tests" / "data" / "traces" / "recorded_h200_runs.db", db)
    store = TraceStore(db)
    nodes = store.nodes(1)
    root = next(n for n in nodes if n.parent_id is None)
    assert root.visits == 1                                  # what was stored: stale
    rewards = {}
    for n in nodes:
        e = store.evaluation(n.id)
        if e is not None and n.status in ("done", "failed"):
            rewards[n.id] = e["reward"]
    parent = {n.id: n.parent_id for n in nodes}
    expect = {n.id: [0, 0.0] for n in nodes}
    for nid, r in rewards.items():
        up = nid
        while up is not None:
            expect[up][0] += 1
            expect[up][1] += r
            up = parent[up]
    for n in nodes:
        visits, value = store.subtree_stats(n.id)
        assert (visits, round(value, 9)) == (expect[n.id][0], round(expect[n.id][1], 9))
    assert store.subtree_stats(root.id)[0] == len(rewards) > 1
    assert f"visits {len(rewards)}," in format_node_raw(store, root.id)


def test_each_exchange_is_stored_once_even_after_its_dict_is_freed():
    """The observer knows an exchange by its dict's id(): a freed dict's id is soon given to a new
    one, which must still be stored as its own exchange (the generate stage's refused attempts
    dropped their dicts)."""
    from optiml.app.records import StoreObserver

    class Rows:
        def __init__(self):
            self.n = 0

        def record_proposal(self, run_id, **kw):
            self.n += 1
            return self.n

    store = Rows()
    obs = StoreObserver(store, 1)
    rows = [obs._exchange(None, "llm", {"prompt": f"p{i}"}) for i in range(500)]   # each dict freed at once
    assert rows == list(range(1, 501)) and store.n == 500
    x = {"prompt": "kept"}
    assert obs._exchange(None, "llm", x) == obs._exchange(None, "llm", x) == 501     # the same dict: once


def test_a_tee_tells_each_observer_in_order_and_a_withdrawal_only_those_that_listen_for_it():
    """The store's observer and a progress printer as one: every event reaches each in the order
    given; a withdrawal reaches those with on_node_withdrawn (an older observer without it is left out)."""
    from optiml.app.records import Tee

    heard = []

    class Old:
        def __init__(self, name):
            self.name = name

        def __getattr__(self, event):
            if not event.startswith("on_node_") or event == "on_node_withdrawn":
                raise AttributeError(event)
            return lambda node: heard.append((self.name, event, node))

    class New(Old):
        def on_node_withdrawn(self, node):
            heard.append((self.name, "on_node_withdrawn", node))

    tee = Tee(New("a"), None, Old("b"))
    for event in ("on_node_added", "on_node_started", "on_node_evaluated", "on_node_withdrawn", "on_node_amended"):
        getattr(tee, event)(7)
    assert heard == [("a", "on_node_added", 7), ("b", "on_node_added", 7), ("a", "on_node_started", 7),
                     ("b", "on_node_started", 7), ("a", "on_node_evaluated", 7), ("b", "on_node_evaluated", 7),
                     ("a", "on_node_withdrawn", 7), ("a", "on_node_amended", 7), ("b", "on_node_amended", 7)]

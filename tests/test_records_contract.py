"""One contract, two record keepers (as optuna runs one suite over its storages): the in-memory
RecordingObserver and the SQLite trace store (StoreObserver, read back with stored_records) must
give identical records for the same scripted search, and a search rebuilt from either goes on
identically. Fakes: the replay evaluator and scripted proposer of test_search_mcts."""
import pytest

from optiml.app.records import StoreObserver, stored_records
from optiml.search import MCTS, RecordingObserver, SearchConfig
from optiml.traces.store import TraceStore
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

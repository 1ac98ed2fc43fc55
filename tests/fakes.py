"""Fakes with behaviour for the tests (named as fakes: none stands in for a GPU result a test
then claims as GPU behaviour)."""


class FakeHarness:
    """The Harness protocol's members besides ``run``, for fake harnesses to inherit."""
    lends_gpu = False
    timeout_s = 120.0
    starts = 0

    def start(self):
        pass

    def close(self):
        pass


def fake_gpu_machine(monkeypatch, worker, sanitizer=None, settle: bool = False) -> None:
    """A FAKE GPU machine for ``optimize``/``generate`` on the CPU: one GPU named "FAKE GPU", the
    persistent worker replaced by ``worker`` (a FakeHarness), and compute-sanitizer by ``sanitizer``
    when given; the runner's settling wait off unless ``settle``."""
    import optiml.gpus as gpus
    import optiml.verify.sanitizer as sanitizer_module
    import optiml.verify.worker_client as worker_client

    monkeypatch.setattr(gpus, "require_gpu", lambda command: None)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [(0, "FAKE GPU")])
    monkeypatch.setattr(gpus, "gpu_facts", lambda: ("FAKE GPU", "0.0"))
    monkeypatch.setattr(worker_client, "WorkerHarness", worker)
    if sanitizer is not None:
        monkeypatch.setattr(sanitizer_module, "Sanitizer", sanitizer)
    if not settle:
        monkeypatch.setattr("optiml.runner.stages.SETTLE_S", 0.0)


class FakeFuture:
    """A FAKE dask future whose task already ran: its value, done, nothing to cancel."""

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value

    def done(self):
        return True

    def cancel(self):
        pass

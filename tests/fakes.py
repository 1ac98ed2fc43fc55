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

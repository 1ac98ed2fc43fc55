"""The limit on the header bytes a DaskBuilder ships with one build: headers of exactly the limit
travel (and the build goes on), one byte more is a UserError before anything is sent. The dask
client is a FAKE that runs each task inline in this process (optiml's own worker-side function,
nvcc for real); no cluster is started."""
import re

import pytest

pytest.importorskip("distributed")

import optiml.cluster as cluster_mod  # noqa: E402
from optiml.cluster import DaskBuilder  # noqa: E402
from optiml.errors import UserError  # noqa: E402
from tests.fakes import FakeFuture  # noqa: E402

LIMIT = 4096
SOURCE = '#include "scale.cuh"\n__global__ void scale(float* x) { x[threadIdx.x] *= FACTOR; }\n'


class FakeInlineClient:
    """A FAKE dask client: ``submit`` runs the function here at once and records its name and arguments."""

    def __init__(self):
        self.sent = []

    def submit(self, fn, *args, key=None, pure=None, resources=None, workers=None):
        self.sent.append((fn.__name__, args))
        return FakeFuture(fn(*args))


def header_of(size: int) -> bytes:
    head = b"#define FACTOR 2.0f\n// "
    data = head + b"x" * (size - len(head) - 1) + b"\n"
    assert len(data) == size
    return data


@pytest.fixture
def builder(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_mod, "HEADER_LIMIT", LIMIT)
    client = FakeInlineClient()
    b = DaskBuilder(client, "sm_90", cache_dir=tmp_path / "cache")
    assert [name for name, _ in client.sent] == ["_remote_versions"]
    return b


def test_headers_of_exactly_the_limit_are_shipped_and_the_build_goes_on(builder, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.cuh").write_bytes(header_of(LIMIT))
    result = builder.build(SOURCE, ("-O3",), include_dir=inc)
    assert result.ok, result.log
    assert builder.submitted == 1
    [(name, args)] = builder.client.sent[1:]
    assert name == "_remote_build" and args[-1] == {"scale.cuh": header_of(LIMIT)}   # the headers shipped


def test_one_header_byte_past_the_limit_is_a_user_error_and_nothing_is_sent(builder, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.cuh").write_bytes(header_of(LIMIT + 1))
    with pytest.raises(UserError, match=re.escape(f"{inc}: its headers are more than ") + r"\d+ MiB to send to the dask workers"):
        builder.build(SOURCE, ("-O3",), include_dir=inc)
    assert builder.submitted == 0 and len(builder.client.sent) == 1

"""DeviceFunction's own steps, run on host memory: the user's function called with arrays that alias
the case's buffers (bfloat16 and zero-size ones included), on the worker's stream, its results in the
output buffers, and the case's buffers read from a case drawn on the device or uploaded. FakeTorch and
FakeCupy read a ``__cuda_array_interface__`` pointer as a host address, so the aliasing logic runs
for real on the CPU (not GPU behaviour: tests/gpu/test_gpu_reference.py runs it on a GPU)."""
import contextlib
import ctypes
import types

import numpy as np
import pytest

import optiml.verify.frameworks as frameworks
from optiml.verify.frameworks import DeviceFunction, case_buffers
from tests.test_spec import SPEC, load

torch = pytest.importorskip("torch", reason="torch is not installed here")


def host_array(obj) -> np.ndarray:
    """The host memory a ``__cuda_array_interface__`` names, as a numpy array aliasing it."""
    d = obj.__cuda_array_interface__
    dt, shape = np.dtype(d["typestr"]), tuple(d["shape"])
    n = int(np.prod(shape)) * dt.itemsize
    return np.frombuffer((ctypes.c_char * n).from_address(d["data"][0]), dtype=dt).reshape(shape)


class FakeStream:
    """A framework's external stream: records the handle it wraps and whether work ran inside it."""

    def __init__(self, handle, **kw):
        self.handle, self.kw, self.entered = handle, kw, 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        return False


class FakeTorch:
    """torch with a CUDA device and streams standing in on the CPU: ``as_tensor`` of a device
    pointer is a CPU tensor over that (host) address."""

    def __init__(self):
        self.devices = []
        self.cuda = types.SimpleNamespace(ExternalStream=FakeStream, stream=self._stream)

    def __getattr__(self, name):
        return getattr(torch, name)

    def device(self, kind, index):
        self.devices.append((kind, index))
        return torch.device("cpu")

    def _stream(self, s):
        return s

    def as_tensor(self, obj, device=None):
        if hasattr(obj, "__cuda_array_interface__"):
            return torch.from_numpy(host_array(obj))
        return torch.as_tensor(obj, device=device)


class FakeCupy:
    """CuPy on the CPU: numpy arrays, ``asarray`` of a device pointer aliasing that host address."""

    def __init__(self):
        self.cuda = types.SimpleNamespace(Device=lambda i: ("cupy device", i), ExternalStream=FakeStream)

    def __getattr__(self, name):
        return getattr(np, name)

    def asarray(self, obj):
        return host_array(obj) if hasattr(obj, "__cuda_array_interface__") else np.asarray(obj)


class FakeGpu:
    def __init__(self):
        self.index, self.syncs = 3, 0
        self.stream = types.SimpleNamespace(handle=0xABC, synchronize=self._sync)

    def _sync(self):
        self.syncs += 1


def device_function(monkeypatch, tmp_path, kind, source, name="scale"):
    fake = FakeTorch() if kind == "torch" else FakeCupy()
    monkeypatch.setattr(frameworks, "import_framework", lambda k: fake)
    (tmp_path / "fn.py").write_text(source)
    return DeviceFunction(kind, tmp_path / "fn.py", name, FakeGpu()), fake


class FakeUploadedCase:
    """A DeviceCase's surface: host arrays, their (here host) buffers, the scalars."""

    def __init__(self, arrays: dict, scalars: dict):
        self.data = types.SimpleNamespace(arrays=arrays, scalars=scalars)
        self.bufs = {k: v.ctypes.data for k, v in arrays.items()}


class FakeDrawnCase:
    """A FilledCase's surface: buffers and their shapes (``meta``) with no host arrays."""

    def __init__(self, bufs: dict, shapes: dict, scalars: dict):
        self.bufs, self.scalars = bufs, scalars
        self.meta = {k: ("float32", 0, s) for k, s in shapes.items()}


def test_a_torch_function_runs_on_the_workers_stream_and_device(monkeypatch, tmp_path):
    f, fake = device_function(monkeypatch, tmp_path, "torch", "def scale(x, n, alpha):\n    return alpha * x\n")
    assert fake.devices == [("cuda", 3)] and f.device == torch.device("cpu")
    assert isinstance(f.stream, FakeStream) and f.stream.handle == 0xABC and f.stream.kw == {"device": f.device}
    spec = load(tmp_path, SPEC)
    x, y = np.arange(6, dtype=np.float32), np.full(6, np.nan, np.float32)
    f(spec, FakeUploadedCase({"x": x, "y": y}, {"n": np.int32(6), "alpha": np.float32(0.5)}))
    assert np.array_equal(y, 0.5 * np.arange(6, dtype=np.float32))      # copied into the output buffer
    assert f.stream.entered == 1 and f.gpu.syncs == 1


def test_a_cupy_function_writes_its_output_in_place_on_the_workers_stream(monkeypatch, tmp_path):
    src = "def scale(x, y, n, alpha):\n    y[...] = alpha * x + n\n"
    f, _ = device_function(monkeypatch, tmp_path, "cupy", src)
    assert f.device == ("cupy device", 3) and isinstance(f.stream, FakeStream) and f.stream.handle == 0xABC
    spec = load(tmp_path, SPEC)
    x, y = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    f(spec, FakeUploadedCase({"x": x, "y": y}, {"n": np.int32(5), "alpha": np.float32(2.0)}))
    assert np.array_equal(y, 2 * np.arange(5, dtype=np.float32) + 5)
    assert f.stream.entered == 1 and f.gpu.syncs == 1


def test_a_bfloat16_buffer_is_seen_as_a_bfloat16_tensor_over_the_same_memory(monkeypatch, tmp_path):
    f, _ = device_function(monkeypatch, tmp_path, "torch", "def scale(x):\n    return x\n")
    bits = torch.tensor([1.0, -2.5, 0.375], dtype=torch.bfloat16).view(torch.int16).numpy().copy()
    t = f.view(bits.ctypes.data, (3,), "bfloat16")
    assert t.dtype == torch.bfloat16 and t.tolist() == [1.0, -2.5, 0.375]
    t[0] = 4.0                                                  # an alias, not a copy
    assert torch.from_numpy(bits).view(torch.bfloat16)[0].item() == 4.0


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_a_zero_size_argument_is_an_empty_array_of_its_dtype(monkeypatch, tmp_path, kind):
    f, _ = device_function(monkeypatch, tmp_path, kind, "def scale(x):\n    return x\n")
    a = f.view(0, (0, 4), "float32")
    assert tuple(a.shape) == (0, 4)
    assert a.dtype == (torch.float32 if kind == "torch" else np.float32)


def test_the_case_buffers_come_from_an_uploaded_case_and_from_a_drawn_one(tmp_path):
    spec = load(tmp_path, SPEC)
    x, y = np.zeros((6,), np.float32), np.zeros((6,), np.float32)
    up = FakeUploadedCase({"x": x, "y": y}, {"n": np.int32(6), "alpha": np.float32(0.5)})
    arrays, scalars = case_buffers(spec, up)
    assert arrays == {"x": (x.ctypes.data, (6,), "float32"), "y": (y.ctypes.data, (6,), "float32")}
    assert scalars == {"n": 6, "alpha": 0.5}
    drawn = FakeDrawnCase({"x": 1024, "y": 4096}, {"x": [7], "y": [7]}, {"n": 7, "alpha": 1.5})
    arrays, scalars = case_buffers(spec, drawn)
    assert arrays == {"x": (1024, (7,), "float32"), "y": (4096, (7,), "float32")}
    assert scalars == {"n": 7, "alpha": 1.5}


def test_a_function_whose_signature_cannot_be_read_gets_no_output_to_write(monkeypatch, tmp_path):
    """A builtin has no readable signature: it takes the inputs and scalars, and its outputs come
    from what it returns."""
    f, _ = device_function(monkeypatch, tmp_path, "torch", "scale = max\n")
    assert f.params == set()
    spec = load(tmp_path, SPEC)
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    kwargs, outs = f.arguments(spec, FakeUploadedCase({"x": x, "y": y}, {"n": np.int32(4), "alpha": np.float32(2.0)}))
    assert sorted(kwargs) == ["alpha", "n", "x"] and sorted(outs) == ["y"]

"""The counter-based generator behind the inputs drawn on the GPU, checked on the CPU: the host
mirror's random bits are those gpu_ops.cu computes (splitmix64's finaliser of key + (2i + j + 1)
GAMMA), a seed's streams are the same from one version to the next (a case is drawn again from
its seed), and integer draws keep their values across the whole of uint64."""
import re

import numpy as np

from optiml.spec import Init
from optiml.verify import gpu_ops

M64 = (1 << 64) - 1


def _splitmix64_finaliser(z: int) -> int:
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_the_device_draws_bits_of_the_counter_2i_plus_j_plus_1():
    body = re.search(r"u64 draw_bits\(u64 key, u64 i, u64 j\) \{\s*return (.+?);", gpu_ops.SOURCE.read_text())
    assert body and body.group(1).replace(" ", "") == "mix64(key+(2*i+j+1)*OPTIML_GAMMA)"


def test_the_host_draw_bits_are_the_devices_for_both_draws():
    key = gpu_ops.stream_key(11, 3)
    index = np.array([0, 1, 2, 1000, 1 << 40, (1 << 63) - 1], np.uint64)
    for j in (0, 1):
        got = gpu_ops.draw_bits(key, index, j)
        want = [_splitmix64_finaliser(key + (2 * int(i) + j + 1) * gpu_ops.GAMMA) for i in index]
        assert [int(v) for v in got] == want, j


def test_the_two_draws_of_an_element_are_not_its_neighbours_draws():
    key = gpu_ops.stream_key(5, 0)
    index = np.arange(1, 100, dtype=np.uint64)
    first, second = gpu_ops.draw_bits(key, index, 0), gpu_ops.draw_bits(key, index, 1)
    assert not (first == second).any()
    assert not np.isin(first, gpu_ops.draw_bits(key, index - np.uint64(1), 1)).any()


def test_a_seeds_stream_keys_are_those_of_earlier_versions():
    assert gpu_ops.stream_key(0, 0) == 0x48218226FF3CD4BF
    assert gpu_ops.stream_key(1, 0) == 0xDCE423FC82C0D5B8
    assert gpu_ops.stream_key(1, 1) == 0xAFE5D660580BBFA9
    assert gpu_ops.stream_key(7, 2) == 0x71A2A4F11DEB90F9


def test_a_seeds_integer_draws_are_those_of_earlier_versions():
    u32 = gpu_ops.host_fill(4, "uint32", Init("integers", low=0, high=2 ** 32), seed=7, stream=1)
    assert u32.tolist() == [4023902890, 2291684825, 3675609202, 3897009191]
    i64 = gpu_ops.host_fill(4, "int64", Init("integers", low=-2 ** 63, high=2 ** 63), seed=1, stream=2)
    assert i64.tolist() == [3234463806125328583, -4051421148655235892, -2575959841479901984, 8739384690589013968]


def test_saturate_keeps_uint64_values_above_two_to_the_63():
    values = np.array([0.0, 2.0 ** 63, 1.5 * 2.0 ** 63, 2.0 ** 64 - 2048, 2.0 ** 64, -1.0, np.nan])
    got = gpu_ops.saturate(values, "uint64")
    assert got.dtype == np.uint64
    assert got.tolist() == [0, 2 ** 63, 3 << 62, 2 ** 64 - 2048, 2 ** 64 - 1, 0, 0]


def test_saturate_keeps_signed_and_narrow_unsigned_values():
    assert gpu_ops.saturate(np.array([-129.0, -128.0, -1.0, 127.0, 128.0]), "int8").tolist() == [-128, -128, -1, 127, 127]
    assert gpu_ops.saturate(np.array([-1.0, 0.0, 255.0, 256.0]), "uint8").tolist() == [0, 0, 255, 255]
    assert gpu_ops.saturate(np.array([-2.0 ** 63, 2.0 ** 62]), "int64").tolist() == [-2 ** 63, 2 ** 62]


def test_a_uniform_uint64_draw_covers_the_upper_half_of_its_range():
    v = gpu_ops.host_fill(4000, "uint64", Init("uniform", low=0.0, high=1.8e19), seed=2, stream=0)
    upper = v[v >= np.uint64(1 << 63)]
    assert 0.4 * v.size < upper.size < 0.6 * v.size
    assert np.unique(upper).size > 0.9 * upper.size          # spread out, not piled on one value
    assert int(v.max()) > 1.7e19

"""A spec's [baseline] function fails as itself: whatever it raises while it is verified or timed in
the GPU child becomes one KernelFault whose sentence names the function's exception, while a CUDA
fault of a launch and the driver's own errors (where the caller tells them apart) pass through."""
import pytest

from optiml.verify.gpu import KernelFault, baseline_faults


class DriverError(Exception):
    """A stand-in for the driver's error type, which the timing passes through."""


def test_an_exception_of_the_function_is_its_failure_said_as_such():
    with pytest.raises(KernelFault) as e:
        with baseline_faults():
            raise ValueError("shapes differ")
    assert str(e.value) == "the baseline function raised ValueError: shapes differ"
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_kernel_fault_and_the_named_driver_errors_pass_through_unchanged():
    fault = KernelFault("an illegal address")
    with pytest.raises(KernelFault) as e:
        with baseline_faults():
            raise fault
    assert e.value is fault
    with pytest.raises(DriverError):
        with baseline_faults((DriverError,)):
            raise DriverError("launch failed")
    with pytest.raises(KernelFault, match="raised DriverError: launch failed"):
        with baseline_faults():
            raise DriverError("launch failed")


def test_a_function_that_returns_leaves_nothing_raised():
    with baseline_faults():
        value = 3
    assert value == 3

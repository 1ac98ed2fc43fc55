"""The package's own exceptions.

``UserError`` is for problems a user can fix (a bad spec, a missing file, an unknown flag):
its message is one sentence naming the file, field or flag, and the CLI prints it without a
traceback. Anything else that escapes is a bug in optiml.
"""


class OptimlError(Exception):
    """Base class of optiml's exceptions."""


class UserError(OptimlError):
    """A problem the user can fix; the message is one clear sentence."""


class SpecError(UserError):
    """The task spec is missing, malformed or inconsistent with the kernel."""


class ExprError(UserError):
    """An expression in a spec or a launch comment cannot be evaluated."""


class EnvironmentProblem(UserError):
    """A required tool or device is missing (nvcc, a GPU, pycuda, ncu)."""

"""What ``dir(optiml)`` shows a user (tab completion, ``help``): the lazily imported API functions
``compile``, ``evaluate`` and ``optimize`` beside the module's own names, in sorted order."""
import optiml


def test_dir_of_the_package_lists_the_lazy_api_functions_sorted():
    names = dir(optiml)
    assert {"compile", "evaluate", "optimize", "__version__"} <= set(names)
    assert names == sorted(names)


def test_every_name_dir_lists_can_be_looked_up():
    for name in dir(optiml):
        getattr(optiml, name)

"""Registry entries for the contrib wrappers and stateless stages that are not optimizers themselves: ``normalize``
(unit global norm) and ``split_real_and_imaginary`` (runs a real optimizer on complex parameters)."""

from . import Entry

ENTRIES = [
    Entry("contrib.normalize", inject=False),
    Entry(
        "contrib.split_real_and_imaginary",
        make=lambda ox: ox.contrib.split_real_and_imaginary(ox.adam(1e-2)),
        complex_ok=True,
    ),
]

COVERED = {
    "contrib.NormalizeState": "tests/contrib/test_normalize.py",
    "contrib.SplitRealAndImaginaryState": "tests/contrib/test_complex.py",
}

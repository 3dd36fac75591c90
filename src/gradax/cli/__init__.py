"""gradax.cli: train, compare optimizers and plot schedules from the command line (``gradax --help``)."""

from ._main import main as main

"""The command line adds no public library names."""

ENTRIES = []
COVERED = {}

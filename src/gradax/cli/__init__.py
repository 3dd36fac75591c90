"""gradax.cli."""

"""gradax.transforms."""

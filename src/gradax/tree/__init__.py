"""gradax.tree."""

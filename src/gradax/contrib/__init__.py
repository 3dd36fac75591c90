"""gradax.contrib."""

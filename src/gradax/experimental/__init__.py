"""gradax.experimental."""

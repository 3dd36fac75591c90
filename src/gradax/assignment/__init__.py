"""gradax.assignment."""

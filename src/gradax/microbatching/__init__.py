"""gradax.microbatching."""

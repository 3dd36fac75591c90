"""gradax.losses."""

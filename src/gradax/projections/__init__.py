"""gradax.projections."""

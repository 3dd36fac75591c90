"""gradax.optimizers."""

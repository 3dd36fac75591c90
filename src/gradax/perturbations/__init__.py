"""gradax.perturbations."""

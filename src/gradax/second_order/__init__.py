"""gradax.second_order."""

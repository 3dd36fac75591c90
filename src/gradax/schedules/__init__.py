"""gradax.schedules."""

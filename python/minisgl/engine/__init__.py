"""Running the model: sampling, generation loops, and later the full engine."""

"""Load generator, GPU-serving simulator and reports."""

"""The brain: cost model, alpha estimators, content classifier, policies. Pure Python + numpy; no I/O."""

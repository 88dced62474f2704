"""What runs inside an engine worker: verifier, proposers, tiny reference engine and its OpenAI server."""

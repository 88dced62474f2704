"""The I/O shell: OpenAI-compatible reverse proxy, upstream pools, scraper, shared state, metrics."""

"""adaptspec: adaptive speculative decoding for LLM serving.

An OpenAI-compatible reverse proxy decides per request whether to speculate, with which proposer and
how many tokens (gamma); engine workers verify drafts with a distribution-exact rejection sampler.

Layers (dependencies point down only):

    adaptspec.control       cost model, alpha estimators, content classifier, policies (pure, no I/O)
    adaptspec.proxy         the OpenAI-compatible proxy (aiohttp), state backends, scraper, metrics
    adaptspec.worker        verifier, proposers, tiny reference engine + OpenAI server
    adaptspec.integrations  vLLM plugin, SGLang adapter
    adaptspec.bench         load generator, GPU-serving simulator, reports
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

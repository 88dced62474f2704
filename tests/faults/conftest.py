"""The fault suite reuses the proxy tests' real-process fixtures (test upstreams, `adaptspec serve`, redis)."""

from proxy.conftest import proxies, redis_server, upstreams  # noqa: F401  (fixtures, registered by import)

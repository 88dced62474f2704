"""The I/O shell: OpenAI-compatible reverse proxy, upstream pools, scraper, shared state, metrics.

    from adaptspec.proxy import Proxy, create_app
    proxy = Proxy(load_config_file("pools.yaml"))
    app = create_app(proxy)          # aiohttp web.Application; `adaptspec serve` runs it

Modules: app (Proxy + routes), handlers (endpoints), upstream (workers, pools, HTTP client), scrape
(/metrics scraper + parsers), feedback (acceptance -> alpha), state (memory / Redis), metrics
(Prometheus + PromQL), reload (SIGHUP + file watch), embedded (the default worker), configfile
(${VAR} expansion), errors (OpenAI-style errors), serve (foreground runner).
"""

from adaptspec.proxy.app import Proxy, create_app
from adaptspec.proxy.configfile import load_config_file

__all__ = ["Proxy", "create_app", "load_config_file"]

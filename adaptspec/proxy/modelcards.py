"""GET /v1/models: the models the proxy routes, with the workers' own model cards passed through.

The scraper keeps each worker's `/v1/models` cards (`Worker.cards`, learnt once per worker: scrape.py).
One card per model id the proxy routes (`Pools.model_ids`), built from every worker serving it: fields
come from the cards in worker-name order (the first worker that reports a field wins: `owned_by`, `root`,
`parent`, `permission`, ...), except `max_model_len`, which is the smallest any of them reports (a request
may go to any of them). A model no worker has described yet gets the proxy's minimal card.
"""

from __future__ import annotations

from aiohttp import web


def merged_cards(proxy) -> list[dict]:
    workers = sorted(proxy.pools.workers.values(), key=lambda w: w.name)
    out = []
    for model_id in proxy.pools.model_ids():
        upstream = [w.cards[model_id] for w in workers
                    if w.cards and model_id in w.cards and w.models is not None and model_id in w.models]
        card: dict = {"id": model_id, "object": "model", "created": proxy.started, "owned_by": "adaptspec"}
        for c in reversed(upstream):  # the first worker's fields win
            card.update(c)
        lengths = [c["max_model_len"] for c in upstream
                   if isinstance(c.get("max_model_len"), int) and not isinstance(c["max_model_len"], bool)]
        if lengths:
            card["max_model_len"] = min(lengths)
        card.update(id=model_id, object="model")
        out.append(card)
    return out


async def models(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    return web.json_response({"object": "list", "data": merged_cards(proxy)})

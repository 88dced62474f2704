"""Per-request acceptance prediction through the proxy's real request path (in process, the test upstream on
loopback): features once per request, decisions on the request's own predicted alphas, online learning from
each finished request's `usage.speculative`, and `estimator.predict: false`."""

from __future__ import annotations

import contextlib

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adaptspec.control.alpha import request_temperature
from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app
from adaptspec.proxy.request import generation_of

from . import upstream_app

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")  # app["proxy"]

CODE = "def add(a, b):\n    total = a + b\n    return total\n\nclass Box:\n    size = 3\n"


def edit(i: int) -> str:
    return f"Fix the formatting of this code and return it whole:\n```python\n{CODE.replace('add', f'f{i}')}```"


def question(i: int) -> str:
    return f"Write a Python function that returns the {i}th prime number."


@contextlib.asynccontextmanager
async def served(predict: bool):
    up_app = upstream_app.build(name="w0", model="tiny", engine="adaptspec", alpha=0.5, chunks=6, delay_ms=0)
    async with TestClient(TestServer(up_app)) as up:
        url = str(up.make_url("")).rstrip("/")
        cfg = parse_config({"estimator": {"predict": predict}, "server": {"scrape_interval_s": 30}, "pools": [
            {"name": "p", "engine": "adaptspec", "proposers": ["ngram"], "profile": "cpu-tiny", "max_gamma": 8,
             "workers": [{"name": "w0", "url": url}]}]})
        proxy = Proxy(cfg)
        async with TestClient(TestServer(create_app(proxy))) as client:
            yield proxy, client


async def ask(client: TestClient, text: str, alpha: float) -> tuple[str, str, int]:
    r = await client.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 48, "test_alpha": alpha,
                                                          "messages": [{"role": "user", "content": text}]})
    assert r.status == 200
    return r.headers["x-adaptspec-class"], r.headers["x-adaptspec-proposer"], int(r.headers["x-adaptspec-gamma"])


@pytest.mark.parametrize("predict", [True, False])
async def test_edits_and_questions_of_one_class_get_their_own_plans(predict):
    """Code edits accept 0.95 of n-gram drafts, code questions 0.15. With prediction the proxy learns it from
    the feedback and plans an edit with a longer gamma than a question; without, one class gets one plan."""
    async with served(predict) as (proxy, client):
        for i in range(60):
            cls, _, _ = await ask(client, edit(i) if i % 2 else question(i), 0.95 if i % 2 else 0.15)
            assert cls == "code"
        e = await ask(client, edit(100), 0.95)
        q = await ask(client, question(100), 0.15)
        learnt = proxy.predictor.to_dict()["alpha"]
        if predict:
            assert learnt["ngram"]["n_obs"] >= 30  # every request that drafted taught it
            assert e[1] == "ngram" and (q[1] == "none" or q[2] < e[2])
        else:
            assert learnt == {} and e[1:] == q[1:]


def test_features_only_for_policies_that_read_alphas():
    body = {"model": "tiny", "messages": [{"role": "user", "content": edit(1)}], "max_tokens": 8}
    pools = [{"name": "p", "engine": "adaptspec", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]
    for policy, on in (({"kind": "goodput"}, True), ({"kind": "static", "proposer": "ngram", "gamma": 4}, False),
                       ({"kind": "goodput", "holdout": {"share": 0.1}}, True)):
        proxy = Proxy(parse_config({"policy": policy, "pools": pools}))
        cls, feats = proxy.classify_body(generation_of(body))
        assert cls == "code" and (feats is not None) == on
    off = Proxy(parse_config({"estimator": {"predict": False}, "pools": pools}))
    assert off.classify_body(generation_of(body)) == ("code", None)


def test_features_of_a_repeated_prompt_are_remembered_and_equal_fresh_ones(monkeypatch):
    import adaptspec.proxy.app as app_module
    from adaptspec.control.classify import Classifier, request_text
    from adaptspec.control.predict import RequestFeatures

    monkeypatch.setattr(app_module, "MEMO_SIZE", 3)
    pools = [{"name": "p", "engine": "adaptspec", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]
    proxy = Proxy(parse_config({"pools": pools}))
    bodies = [{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": edit(i)}], "max_tokens": 8 + i,
               "temperature": 0.5 * (i % 2)} for i in range(5)]
    bodies += [{"model": "tiny", "prompt": "x " * 3000}]  # longer than MEMO_MAX_CHARS: never kept
    bodies += [{**bodies[0], "tools": [{"type": "function"}]}]  # same text: same features, class from the field
    for _ in range(2):  # the second pass answers the last MEMO_SIZE prompts from the memo
        for body in bodies:
            cls, feats = proxy.classify_body(generation_of(body))
            want_cls, scores, _ = Classifier.default().predict_request(body)
            last, context = request_text(body)
            text = f"{context}\n\n{last}" if context else last
            fresh = RequestFeatures.from_prompt(text, body.get("max_tokens"),
                                                request_temperature(body.get("temperature")), scores)
            assert cls == want_cls and feats.class_scores == fresh.class_scores
            assert feats.x.tolist() == fresh.x.tolist()
    assert cls == "structured"
    assert len(proxy._features_memo) == 3
    assert all(not f.x.flags.writeable for f in proxy._features_memo.values())  # shared: read-only

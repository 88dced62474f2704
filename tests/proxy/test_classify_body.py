"""Proxy.classify_body: the prediction features are computed only when a candidate worker speculates, and the
class (`server.classify: speculating`, the default) only then too."""

from __future__ import annotations

import pytest

from adaptspec.control.config import parse_config
from adaptspec.errors import ConfigError, RequestError
from adaptspec.proxy.app import UNCLASSIFIED, Proxy
from adaptspec.proxy.request import generation_of

BODY = {"model": "m", "messages": [{"role": "user", "content": "Fix the bug:\n```\ndef f(x):\n  return x +\n```"}]}


def _proxy(classify: str | None = None) -> Proxy:
    server = {} if classify is None else {"classify": classify}
    return Proxy(parse_config({"policy": {"kind": "goodput"}, "server": server, "pools": [
        {"name": "plain", "engine": "openai", "per_request": False, "proposers": [],
         "workers": [{"name": "o0", "url": "http://127.0.0.1:9"}]},
        {"name": "spec", "engine": "adaptspec", "proposers": ["ngram"],
         "workers": [{"name": "a0", "url": "http://127.0.0.1:9"}]}]}))


def test_features_only_when_a_candidate_speculates():
    proxy = _proxy("always")
    plain, spec = proxy.pools.workers["o0"], proxy.pools.workers["a0"]
    cls, feats = proxy.classify_body(generation_of(BODY), [plain])
    assert cls == "code" and feats is None  # nothing reads or learns a predicted alpha there
    for candidates in ([spec], [plain, spec], None):  # None: the caller does not say (all features)
        cls_s, feats_s = proxy.classify_body(generation_of(BODY), candidates)
        assert cls_s == cls and feats_s is not None
        assert feats_s.class_scores[0] > 0.5  # CONTENT_CLASSES[0] is "code"


def test_class_only_when_a_candidate_speculates_by_default():
    proxy = _proxy()
    plain, spec = proxy.pools.workers["o0"], proxy.pools.workers["a0"]
    assert proxy.classify_body(generation_of(BODY), [plain]) == (UNCLASSIFIED, None)
    for candidates in ([spec], [plain, spec], None):  # as with "always" wherever a class can change the decision
        cls, feats = proxy.classify_body(generation_of(BODY), candidates)
        assert cls == "code" and feats is not None


def test_unclassified_body_is_still_checked():
    proxy = _proxy()
    bad = generation_of({"model": "m", "messages": [{"role": "user", "content": 7}]})
    with pytest.raises(RequestError, match=r"messages\[0\]\.content"):
        proxy.classify_body(bad, [proxy.pools.workers["o0"]])


def test_classify_setting_is_validated():
    with pytest.raises(ConfigError, match="server.classify"):
        parse_config({"server": {"classify": "never"}})


def test_unclassified_series_exist_from_the_start_for_plain_workers_only():
    from prometheus_client import generate_latest

    def series(proxy: Proxy) -> list[str]:
        return [ln for ln in generate_latest(proxy.metrics.registry).decode().splitlines()
                if "unclassified" in ln and not ln.startswith("#")]

    default = series(_proxy())
    assert any(ln.startswith('adaptspec_requests_total{code="200",content_class="unclassified",proposer="none",'
                             'worker="o0"}') for ln in default), default
    assert default and not any('worker="a0"' in ln for ln in default)  # a0 speculates: its requests are classified
    assert series(_proxy("always")) == []
    speculating_only = Proxy(parse_config({"pools": [{"name": "spec", "engine": "adaptspec", "proposers": ["ngram"],
                                                      "workers": [{"name": "a0", "url": "http://127.0.0.1:9"}]}]}))
    assert series(speculating_only) == []  # no request there can be unclassified

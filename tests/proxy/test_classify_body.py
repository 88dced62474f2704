"""Proxy.classify_body: the prediction features are computed only when a candidate worker speculates."""

from __future__ import annotations

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy
from adaptspec.proxy.request import generation_of

BODY = {"model": "m", "messages": [{"role": "user", "content": "Fix the bug:\n```\ndef f(x):\n  return x +\n```"}]}


def test_features_only_when_a_candidate_speculates():
    proxy = Proxy(parse_config({"policy": {"kind": "goodput"}, "pools": [
        {"name": "plain", "engine": "openai", "per_request": False, "proposers": [],
         "workers": [{"name": "o0", "url": "http://127.0.0.1:9"}]},
        {"name": "spec", "engine": "adaptspec", "proposers": ["ngram"],
         "workers": [{"name": "a0", "url": "http://127.0.0.1:9"}]}]}))
    plain, spec = proxy.pools.workers["o0"], proxy.pools.workers["a0"]
    cls, feats = proxy.classify_body(generation_of(BODY), [plain])
    assert cls == "code" and feats is None  # nothing reads or learns a predicted alpha there
    for candidates in ([spec], [plain, spec], None):  # None: the caller does not say (all features)
        cls_s, feats_s = proxy.classify_body(generation_of(BODY), candidates)
        assert cls_s == cls and feats_s is not None
        assert feats_s.class_scores[0] > 0.5  # CONTENT_CLASSES[0] is "code"

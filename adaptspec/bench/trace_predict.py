"""Per-request acceptance prediction in trace replays: what the proxy does per request, played on traces.

The proxy computes a request's features once (control/predict.py `RequestFeatures`, from the prompt text,
the classifier's scores, max_tokens and temperature), decides with `AcceptancePredictor.view` (the live
alpha table with the request's own class moved by the predictor's gated shift), and teaches the predictor
from the request's `usage.speculative` when it finishes (control/learn.py). `TracePredictor` does the same for
the simulator (whose finished requests go through the same `learn`):
features of a trace request come from its `prompt` (computed once per request; a trace without prompts
gets no prediction, so its replays are exactly the class-level ones), and the predictor only ever learns
from requests the simulated engine has served (online: no fit on the trace beforehand).
"""

from __future__ import annotations

from adaptspec.bench.traces import TraceRequest
from adaptspec.control.predict import AcceptancePredictor, RequestFeatures
from adaptspec.control.types import AlphaSource


class TracePredictor:
    """An `AcceptancePredictor` with the features of the trace requests it has seen."""

    def __init__(self, predictor: AcceptancePredictor | None = None) -> None:
        self.predictor = predictor or AcceptancePredictor()
        # by object: ids are unique within a file only, and a replay mixes files; the workload holds the
        # requests (and a reference is kept here), so an object's id is never reused while cached
        self._feats: dict[int, tuple[TraceRequest, RequestFeatures | None]] = {}

    def features(self, req: TraceRequest) -> RequestFeatures | None:
        """The request's features (None without a prompt); the classifier scores its prompt once."""
        hit = self._feats.get(id(req))
        if hit is not None:
            return hit[1]
        feats = None
        if req.prompt is not None:
            from adaptspec.control.classify import Classifier

            scores = Classifier.default().predict(req.prompt)[1]
            feats = RequestFeatures.from_prompt(req.prompt, None, req.temperature, scores)
        self._feats[id(req)] = (req, feats)
        return feats

    def view(self, alphas: AlphaSource, feats: RequestFeatures | None, content_class: str) -> AlphaSource:
        return alphas if feats is None else self.predictor.view(alphas, feats, content_class)

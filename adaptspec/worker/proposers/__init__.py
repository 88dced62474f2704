"""Proposers for speculative decoding: one module each, one small protocol (`base.Proposer`)."""

from adaptspec.worker.proposers.base import Draft, ProposeInput, Proposer, SamplingParams
from adaptspec.worker.proposers.draft import DraftModelProposer
from adaptspec.worker.proposers.ngram import NgramProposer, ngram_lookup

__all__ = ["Draft", "DraftModelProposer", "NgramProposer", "ProposeInput", "Proposer", "SamplingParams",
           "ngram_lookup"]

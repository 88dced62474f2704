"""Proposers for speculative decoding: one module each, one small protocol (`base.Proposer`)."""

from adaptspec.worker.proposers.base import Draft, ProposeInput, Proposer, SamplingParams
from adaptspec.worker.proposers.draft import DraftModelProposer
from adaptspec.worker.proposers.eagle import EagleConfig, EagleHead, EagleProposer
from adaptspec.worker.proposers.hybrid import HybridProposer
from adaptspec.worker.proposers.ngram import NgramProposer, ngram_lookup

__all__ = ["Draft", "DraftModelProposer", "EagleConfig", "EagleHead", "EagleProposer", "HybridProposer",
           "NgramProposer", "ProposeInput", "Proposer", "SamplingParams", "ngram_lookup"]

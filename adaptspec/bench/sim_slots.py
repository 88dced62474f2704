"""The simulator's running batch (bench/sim_engine.py): per slot, the request in it, what was decided for it and
its counts so far, and the tallies that apply a span of engine steps to those counts.
"""

from __future__ import annotations

import numpy as np

from adaptspec.bench.sim_core import _PROPOSER_INDEX
from adaptspec.bench.stepwise import StepPlan


class _Slots:
    """The running batch, one row per slot: the request in the slot, what was decided for it, and its counts."""

    def __init__(self, slots: int, G: int, max_output: int) -> None:
        self.G = G  # draft positions counted per request (the point's gamma bound)
        self.active = np.zeros(slots, dtype=bool)
        self.rid = np.zeros(slots, dtype=np.int64)
        self.cls_of = np.zeros(slots, dtype=np.int64)
        self.prop = np.zeros(slots, dtype=np.int64)
        self.gamma = np.zeros(slots, dtype=np.int64)  # the request's k (its highest gamma)
        # per-slot gamma by running batch: caps[s, b] = min(k, the schedule's cap at batch b) (b = 0..slots)
        self.caps = np.zeros((slots, slots + 1), dtype=np.int64)
        self.batch_sizes = np.arange(slots + 1)
        self.alpha = np.zeros((slots, G), dtype=np.float64)
        self.prefill_left = np.zeros(slots, dtype=np.int64)
        self.ctx = np.zeros(slots, dtype=np.int64)
        self.out_left = np.zeros(slots, dtype=np.int64)
        self.gen = np.zeros(slots, dtype=np.int64)
        self.nstep = np.zeros(slots, dtype=np.int64)  # decode steps taken (keys the acceptance coins)
        self.t_arr = np.zeros(slots)
        self.t_first = np.zeros(slots)
        self.d_tok = np.zeros(slots, dtype=np.int64)
        self.a_tok = np.zeros(slots, dtype=np.int64)
        self.pos_acc = np.zeros((slots, G), dtype=np.int64)  # accepted count per draft position
        self.decisions: list = [None] * slots  # the Decision of the request in each slot (for on_finish)
        self.feats: list = [None] * slots  # the features of the request in each slot (with a predictor)
        # per position, the drafts that reached it (the worker's tried_per_position): exact conditional rates
        # whatever length each draft had, as the proxy counts them from usage.speculative
        self.pos_try = np.zeros((slots, G), dtype=np.int64)
        # per-step plans (trace replay of "hybrid" and oracle-step, bench/stepwise.py)
        self.stepwise = np.zeros(slots, dtype=bool)
        self.lookup_always = np.zeros(slots, dtype=bool)
        self.plans: list[StepPlan | None] = [None] * slots
        self.lookup_steps = np.zeros(slots, dtype=np.int64)  # a per-step plan's drafting steps by source
        self.head_steps = np.zeros(slots, dtype=np.int64)
        # a hybrid's lookup steps apart (what its key counts): tried / accepted per position, drafted tokens, and
        # the output positions its head steps covered
        self.lk_try = np.zeros((slots, G), dtype=np.int64)
        self.lk_acc = np.zeros((slots, G), dtype=np.int64)
        self.lk_tok = np.zeros(slots, dtype=np.int64)
        self.hd_try = np.zeros((slots, G), dtype=np.int64)  # ... and its head steps'
        self.hd_acc = np.zeros((slots, G), dtype=np.int64)
        self.head_pos = np.zeros(slots, dtype=np.int64)
        self.step_gamma = np.zeros((slots, G + 1), dtype=np.int64)  # decode steps by the gamma they ran
        # trace replay: the chosen proposer's run per output position of the request in each slot
        self.runs = np.ones((slots, max_output), dtype=np.int64)

    def reset(self, s: int, prompt: int, output: int, arrived: float) -> None:
        """Slot s's counts at the admission of a request of `prompt` / `output` tokens that arrived then."""
        self.step_gamma[s] = 0
        self.alpha[s] = 0.0
        self.prefill_left[s] = prompt
        self.ctx[s] = 0
        self.out_left[s] = output
        self.gen[s] = 0
        self.nstep[s] = 0
        self.t_arr[s] = arrived
        self.d_tok[s] = self.a_tok[s] = 0
        self.pos_acc[s] = self.pos_try[s] = 0
        self.lk_try[s] = self.lk_acc[s] = self.hd_try[s] = self.hd_acc[s] = 0
        self.lk_tok[s] = self.head_pos[s] = 0

    def tally_plain(self, dec_idx: np.ndarray, g_dec: np.ndarray, acc_h: np.ndarray, emitted: np.ndarray) -> int:
        """Apply h plain steps to the decoding slots `dec_idx` (`acc_h`: [n_dec, h] drafts accepted at each step,
        with gammas `g_dec`): acceptance per position, emitted = accepted + 1 (the last one capped by max_tokens,
        `emitted`). Returns the tokens emitted."""
        h = acc_h.shape[1]
        spec = g_dec > 0
        if spec.any():
            si, g_si = dec_idx[spec], g_dec[spec]
            kk = np.arange(self.G)
            self.pos_acc[si] += (acc_h[spec][:, :, None] > kk[None, None, :]).sum(axis=1)
            self.pos_try[si] += ((acc_h[spec][:, :, None] >= kk[None, None, :])
                                 & (kk[None, None, :] < g_si[:, None, None])).sum(axis=1)
        self.d_tok[dec_idx] += g_dec * h
        self.a_tok[dec_idx] += acc_h.sum(axis=1)
        self.nstep[dec_idx] += h
        self.step_gamma[dec_idx, g_dec] += h
        self.gen[dec_idx] += emitted
        self.ctx[dec_idx] += emitted
        self.out_left[dec_idx] -= emitted
        return int(emitted.sum())

    def tally_planned(self, dec_idx: np.ndarray, acc_h: np.ndarray, dl_h: np.ndarray, sr_h: np.ndarray,
                      emitted: np.ndarray) -> int:
        """Apply h planned steps to the decoding slots `dec_idx` (`acc_h`, `dl_h`, `sr_h`: [n_dec, h] drafts
        accepted, tokens drafted and their source at each step): per-position counts, the hybrid's lookup and head
        steps apart (as `walk_hybrid` counts them). Returns the tokens emitted."""
        h = acc_h.shape[1]
        kk = np.arange(self.G)
        reach = kk[None, None, :] < dl_h[:, :, None]  # [n_dec, h, G] draft position k was drafted
        self.pos_acc[dec_idx] += (acc_h[:, :, None] > kk[None, None, :]).sum(axis=1)
        self.pos_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & reach).sum(axis=1)
        self.d_tok[dec_idx] += dl_h.sum(axis=1)
        self.a_tok[dec_idx] += acc_h.sum(axis=1)
        self.nstep[dec_idx] += h
        np.add.at(self.step_gamma, (np.repeat(dec_idx, h), dl_h.ravel()), 1)
        lk = (sr_h == _PROPOSER_INDEX["ngram"]) & (dl_h > 0)
        self.lookup_steps[dec_idx] += lk.sum(axis=1)
        self.head_steps[dec_idx] += ((sr_h != _PROPOSER_INDEX["ngram"]) & (dl_h > 0)).sum(axis=1)
        self.lk_acc[dec_idx] += ((acc_h[:, :, None] > kk[None, None, :]) & lk[:, :, None]).sum(axis=1)
        # as `walk_hybrid` counts: a lookup draft accepted to its length is tried one position on
        self.lk_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & lk[:, :, None]).sum(axis=1)
        self.lk_tok[dec_idx] += np.where(lk, dl_h, 0).sum(axis=1)
        hd = ~lk[:, :, None] & reach
        self.hd_acc[dec_idx] += ((acc_h[:, :, None] > kk[None, None, :]) & hd).sum(axis=1)
        self.hd_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & hd).sum(axis=1)
        self.head_pos[dec_idx] += np.where(lk, 0, acc_h + 1).sum(axis=1)
        self.gen[dec_idx] += emitted
        self.ctx[dec_idx] += emitted
        self.out_left[dec_idx] -= emitted
        return int(emitted.sum())

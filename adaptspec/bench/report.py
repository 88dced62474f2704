"""Tables, target checks and plots for sweep rows (simulated or measured).

A row is a dict with at least `policy`, a load key (`concurrency` or `rate`) and `output_tokens_per_s`;
`simulate`, `bench` and `bench compare` all produce such rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def load_key(rows: Sequence[dict]) -> str:
    return "concurrency" if any(r.get("concurrency") is not None for r in rows) else "rate"


def _policies(rows: Sequence[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        seen.setdefault(r["policy"], None)
    return list(seen)


def pivot(rows: Sequence[dict], metric: str = "output_tokens_per_s") -> tuple[list, list[str], dict]:
    """(loads, policies, {(load, policy): value})."""
    key = load_key(rows)
    loads = sorted({r[key] for r in rows if r.get(key) is not None})
    table = {(r[key], r["policy"]): r.get(metric) for r in rows}
    return loads, _policies(rows), table


def is_static(name: str) -> bool:
    return name == "off" or name.startswith("static")


def check_targets(rows: Sequence[dict], adaptive: str = "adaptive", tolerance: float = 0.98,
                  gain: float = 1.05, oracle: str = "oracle", oracle_tolerance: float = 0.90) -> dict:
    """The proof's three targets, computed from the rows (no hard-coded outcome):

    1. `adaptive` >= tolerance x the best static policy at every load point;
    2. for every static policy there is a load point where `adaptive` >= gain x it;
    3. every always-on static speculation policy is slower than `off` at the top load point;
    4. with `oracle` rows (trace replay): `adaptive` >= oracle_tolerance x `oracle` at the lowest load point
       (reported, with the ratio at every point; not part of `ok`, which stays the three targets above).
    """
    loads, policies, tab = pivot(rows)
    statics = [p for p in policies if is_static(p)]
    out: dict = {"adaptive": adaptive, "tolerance": tolerance, "gain": gain, "per_load": [], "ok": False}
    if adaptive not in policies or not statics:
        out["reason"] = f"need rows for {adaptive!r} and at least one static policy"
        return out
    worst = math.inf
    for load in loads:
        vals = {p: tab.get((load, p)) for p in statics if tab.get((load, p)) is not None}
        a = tab.get((load, adaptive))
        if not vals or a is None:
            continue
        best_name = max(vals, key=vals.get)
        ratio = a / vals[best_name] if vals[best_name] > 0 else math.inf
        worst = min(worst, ratio)
        out["per_load"].append({"load": load, "best_static": best_name, "ratio_to_best": ratio})
    out["min_ratio_to_best"] = worst
    out["t1_ok"] = worst >= tolerance
    wins = {}
    for p in statics:
        best_gain, at = 0.0, None
        for load in loads:
            a, s = tab.get((load, adaptive)), tab.get((load, p))
            if a is not None and s and a / s > best_gain:
                best_gain, at = a / s, load
        wins[p] = {"max_gain": best_gain, "at": at}
    out["max_gain_over"] = wins
    out["t2_ok"] = all(w["max_gain"] >= gain for w in wins.values())
    top = loads[-1] if loads else None
    off = tab.get((top, "off"))
    slow = {p: tab.get((top, p)) / off for p in statics if p != "off" and off and tab.get((top, p)) is not None}
    out["top_load"] = top
    out["static_over_off_at_top"] = slow
    # None: not applicable (no always-on speculation policy, or no `off`, in the rows)
    out["t3_ok"] = all(v < 1.0 for v in slow.values()) if slow else None
    if oracle in policies:
        ratios = {load: tab[(load, adaptive)] / tab[(load, oracle)] for load in loads
                  if tab.get((load, adaptive)) is not None and tab.get((load, oracle))}
        out["oracle_tolerance"] = oracle_tolerance
        out["ratio_to_oracle"] = ratios
        out["t4_ok"] = ratios[min(ratios)] >= oracle_tolerance if ratios else None
    out["ok"] = bool(out["t1_ok"] and out["t2_ok"] and out["t3_ok"] is not False)
    return out


def _fmt(v: object, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def throughput_table(rows: Sequence[dict], metric: str = "output_tokens_per_s", adaptive: str = "adaptive",
                     digits: int = 0) -> str:
    """Markdown: one line per load point, one column per policy, plus adaptive / best static."""
    loads, policies, tab = pivot(rows, metric)
    key = load_key(rows)
    statics = [p for p in policies if is_static(p)]
    extra = adaptive in policies and statics
    vs_oracle = adaptive in policies and "oracle" in policies
    head = [key, *policies] + (["adaptive / best static"] if extra else []) \
        + (["adaptive / oracle"] if vs_oracle else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for load in loads:
        cells = [_fmt(load)] + [_fmt(tab.get((load, p)), digits) for p in policies]
        if extra:
            vals = [tab.get((load, p)) for p in statics if tab.get((load, p))]
            a = tab.get((load, adaptive))
            cells.append(f"{a / max(vals):.2f}x" if vals and a else "–")
        if vs_oracle:
            a, o = tab.get((load, adaptive)), tab.get((load, "oracle"))
            cells.append(f"{a / o:.2f}x" if a and o else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


DETAIL_COLUMNS = ("policy", "output_tokens_per_s", "requests_per_s", "tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p50",
                  "ttft_ms_p99", "e2e_s_p50", "e2e_s_p99", "speculation_share", "mean_gamma", "errors")


def detail_table(rows: Sequence[dict], columns: Sequence[str] = DETAIL_COLUMNS) -> str:
    """Markdown: one line per row with latency percentiles and the decision mix."""
    key = load_key(rows)
    cols = [key] + [c for c in columns if any(c in r for r in rows)] + ["proposer mix"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols)]
    for r in rows:
        mix = r.get("proposer_mix") or {}
        mix_s = " ".join(f"{k}:{v:.0%}" for k, v in mix.items() if v) or "–"
        cells = []
        for c in cols[:-1]:
            v = r.get(c)
            cells.append(_fmt(v, 2 if c in ("speculation_share", "mean_gamma", "requests_per_s", "e2e_s_p50",
                                            "e2e_s_p99") else 1))
        lines.append("| " + " | ".join(cells) + f" | {mix_s} |")
    return "\n".join(lines)


def targets_text(t: dict) -> str:
    if "min_ratio_to_best" not in t:
        return f"targets: not evaluated ({t.get('reason')})"
    mark = {True: "PASS", False: "MISS", None: "n/a"}
    gains = ", ".join(f"{p} {w['max_gain']:.2f}x@{w['at']}" for p, w in t["max_gain_over"].items())
    slow = ", ".join(f"{p} {v:.2f}x" for p, v in t["static_over_off_at_top"].items())
    lines = [
        f"- [{mark[t['t1_ok']]}] adaptive >= {t['tolerance']} x best static at every point: "
        f"min ratio {t['min_ratio_to_best']:.3f}",
        f"- [{mark[t['t2_ok']]}] adaptive >= {t['gain']} x each static somewhere: {gains}",
        f"- [{mark[t['t3_ok']]}] always-on speculation slower than off at {t['top_load']}: {slow}",
    ]
    if "ratio_to_oracle" in t:
        ratios = ", ".join(f"{r:.3f}@{load}" for load, r in t["ratio_to_oracle"].items())
        lines.append(f"- [{mark[t['t4_ok']]}] adaptive >= {t['oracle_tolerance']} x oracle at the lowest load: "
                     f"{ratios}")
    return "\n".join(lines)


def engine_table(rows: Sequence[dict]) -> str:
    """Markdown: what the workers did during each policy's rounds (`bench compare`'s `engine` entries)."""
    key = load_key(rows)
    lines = [f"| {key} | policy | steps | ms / step | batched tokens / step | requests / step | model passes / step |"
             " drafted / step |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = r.get("engine")
        if not e:
            continue
        passes = " ".join(f"{p}:{v:.2f}" for p, v in sorted(e["passes_per_step"].items())) or "–"
        drafted = " ".join(f"{p}:{v:.1f}" for p, v in sorted(e["drafted_per_step"].items())) or "–"
        lines.append(f"| {_fmt(r[key])} | {r['policy']} | {e['steps']:.0f} | {e['step_ms']:.1f} | "
                     f"{e['batched_per_step']:.1f} | {e['requests_per_step']:.1f} | {passes} | {drafted} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def round_spread(rows: Sequence[dict], adaptive: str = "adaptive") -> dict:
    """Per load point: adaptive / best static in each round of an interleaved comparison (`bench compare
    --rounds`), the best static being the one with the highest merged throughput at that point.
    {load: {"best": label, "ratios": [per round], "merged": ratio}}; empty without per-round data."""
    loads, policies, tab = pivot(rows)
    key = load_key(rows)
    per = {(r[key], r["policy"]): r.get("round_output_tokens_per_s") for r in rows}
    out = {}
    for load in loads:
        statics = [p for p in policies if is_static(p) and tab.get((load, p))]
        a_rounds = per.get((load, adaptive))
        if not statics or not a_rounds or not tab.get((load, adaptive)):
            continue
        best = max(statics, key=lambda p: tab[(load, p)])
        b_rounds = per.get((load, best)) or []
        ratios = [a / b for a, b in zip(a_rounds, b_rounds, strict=False) if b]
        out[load] = {"best": best, "ratios": ratios, "merged": tab[(load, adaptive)] / tab[(load, best)]}
    return out


def round_spread_text(rows: Sequence[dict], adaptive: str = "adaptive") -> str:
    """One line per load point: the merged ratio and the per-round ratios with their range (the spread)."""
    lines = []
    for load, s in round_spread(rows, adaptive).items():
        if len(s["ratios"]) < 2:
            continue
        per = ", ".join(f"{r:.2f}" for r in s["ratios"])
        lines.append(f"- {load_key(rows)} {load:g}: adaptive / {s['best']} {s['merged']:.2f}x merged; "
                     f"per round {per} (spread {min(s['ratios']):.2f}-{max(s['ratios']):.2f})")
    return "\n".join(lines)


def plot_sweep(rows: Sequence[dict], out: str | Path, title: str = "") -> Path:
    """Three panels against load: output tokens/s, speedup over `off`, and TPOT p50 (log-2 x axis)."""
    try:
        import matplotlib
    except ImportError:
        from adaptspec.errors import ConfigError

        raise ConfigError("plots need matplotlib: pip install 'adaptspec[bench]'", key="--plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads, policies, tput = pivot(rows)
    _, _, tpot = pivot(rows, "tpot_ms_p50")
    _, _, ttft = pivot(rows, "ttft_ms_p50")
    key = load_key(rows)
    relative = "off" in policies  # middle panel: speedup over off, or TTFT when there is no off
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for p in policies:
        xs = [x for x in loads if tput.get((x, p)) is not None]
        style = {"linewidth": 2.6, "color": "black"} if p == "adaptive" else {"linewidth": 1.4}
        axes[0].plot(xs, [tput[(x, p)] for x in xs], marker="o", markersize=3, label=p, **style)
        if relative:
            base = [(x, tput.get((x, "off"))) for x in xs]
            axes[1].plot([x for x, b in base if b], [tput[(x, p)] / b for x, b in base if b], marker="o",
                         markersize=3, label=p, **style)
        else:
            axes[1].plot(xs, [ttft.get((x, p)) for x in xs], marker="o", markersize=3, label=p, **style)
        axes[2].plot(xs, [tpot.get((x, p)) for x in xs], marker="o", markersize=3, label=p, **style)
    axes[0].set_ylabel("output tokens / s")
    if relative:
        axes[1].set_ylabel("throughput / off")
        axes[1].axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    else:
        axes[1].set_ylabel("TTFT p50 (ms)")
    axes[2].set_ylabel("TPOT p50 (ms)")
    for ax in axes:
        ax.set_xlabel(key)
        if key == "concurrency" and len(loads) > 1 and min(loads) > 0:
            ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig, out: str | Path) -> Path:
    """Write `fig` as a PNG to `out` (creating its folder) and close it."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ---- online calibration under a wrong belief (adaptspec simulate, issue 11) ---------------------------

CALIBRATION_MODES = ("wrong+cal", "right+cal", "wrong", "right")  # belief wrong/right, calibrated or not


def calibration_table(rows: Sequence[dict], scenario: str, adaptive: str = "adaptive") -> str:
    """Markdown for one scenario: `adaptive` under a wrong belief with calibration against the right belief
    (with and without calibration), and the fit at each point. Rows carry `scenario` and `mode`
    (one of CALIBRATION_MODES) besides the simulator's keys."""
    mine = [r for r in rows if r.get("scenario") == scenario and r["policy"] == adaptive]
    key = load_key(mine)
    by = {(r["mode"], r[key]): r for r in mine}
    loads = sorted({r[key] for r in mine})
    head = [key, "wrong belief + cal", "right belief + cal", "wrong, no cal", "right, no cal",
            "wrong+cal / right+cal", "wrong+cal / right no cal", "trusted", "overhead err", "slope err", "kv err",
            "step time err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for load in loads:
        t = {m: (by.get((m, load)) or {}).get("output_tokens_per_s") for m in CALIBRATION_MODES}
        ratio = [f"{t['wrong+cal'] / t[m]:.3f}x" if t["wrong+cal"] and t[m] else "–" for m in ("right+cal", "right")]
        cal = (by.get(("wrong+cal", load)) or {}).get("calibration") or {}
        err = cal.get("rel_error") or {}
        pct = [f"{err[k]:+.1%}" if err.get(k) is not None else "–"
               for k in ("overhead_s", "compute_s_per_token", "kv_s_per_token")]
        st = cal.get("step_time_rel_error")
        lines.append("| " + " | ".join([_fmt(load)] + [_fmt(t[m]) for m in CALIBRATION_MODES] + ratio
                                       + [_fmt(cal.get("trusted")), *pct, f"{st:+.1%}" if st is not None else "–"])
                     + " |")
    return "\n".join(lines)


def plot_calibration(rows: Sequence[dict], out: str | Path, adaptive: str = "adaptive") -> Path:
    """One line per scenario: adaptive under the wrong belief / adaptive under the right belief, with and
    without calibration, against load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), sharey=True)
    for ax, (mode, label) in zip(axes, (("wrong+cal", "with online calibration"), ("wrong", "no calibration")),
                                 strict=True):
        for s in scenarios:
            mine = [r for r in rows if r["scenario"] == s and r["policy"] == adaptive]
            key = load_key(mine)
            tab = {(r["mode"], r[key]): r["output_tokens_per_s"] for r in mine}
            xs = sorted(x for m, x in tab if m == mode and (("right+cal", x) in tab))
            ax.plot(xs, [tab[(mode, x)] / tab[("right+cal", x)] for x in xs], marker="o", markersize=3, label=s)
        ax.axhline(0.97, color="grey", linewidth=0.8, linestyle="--")
        ax.set_title(f"adaptive, wrong belief, {label}")
        ax.set_xlabel("concurrency")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("throughput / adaptive with the right belief (calibrated)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out)

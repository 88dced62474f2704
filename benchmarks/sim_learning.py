"""Learning harness of issue 31 item 5: does adaptive's learning ever make it worse than a fixed plan, or than knowing nothing?

For each seed, each stand-in trace family (benchmarks/standin_traces.py, generated in-process, trace seed = sweep
seed) and each stand-in profile (benchmarks/profiles/*.yaml), run the policies as a user's sweep runs them:
`adaptspec simulate --trace <family> --profile <profile> --proposers ngram,eagle --concurrency 1,8,32,128` with
the default windows and calibration on, the lowest concurrency first and the learning carried over from point
to point (warm start, the default), and adaptive once more with `--cold-start` (the priors at every point).
The statics and the oracle do not learn, so they run once per case; only adaptive runs twice.

    nice -n 10 python benchmarks/sim_learning.py --jobs 2 --md docs/results/sim-learning.md [--json cells.json]

Per (profile, family, seed) and concurrency: adaptive (warm) / the best static, warm / cold adaptive, and
adaptive / the per-request hindsight oracle at c=1. The acceptance block checks issue 31's targets:
adaptive >= 0.97x the best static everywhere, warm >= 0.98x cold everywhere, adaptive >= 0.90x oracle at c=1,
and lists every cell under a target with what adaptive ran (proposer mix, mean gamma while speculating).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import standin_traces  # noqa: E402  (a sibling script)

from adaptspec.bench.simulator import parse_policy, sweep  # noqa: E402
from adaptspec.bench.traces import TraceWorkload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROFILE_DIR = ROOT / "benchmarks" / "profiles"
DEFAULT_PROFILES = "standin-8b-eagle-heavy,standin-70b-20ms"
FAMILIES = ("fleet", "copyheavy", "nocopy", "weakhead", "short")
PROPOSERS = ("ngram", "eagle")
MAX_GAMMA = 8  # `adaptspec simulate --max-gamma` default: static:ngram:16 is out of reach
# `off` counts as a static; static:ngram:16 would exceed MAX_GAMMA
STATICS = ("off", "static:eagle:3", "static:eagle:8", "static:ngram:8")
TARGET_STATIC, TARGET_COLD, TARGET_ORACLE = 0.97, 0.98, 0.90
KEEP = ("policy", "concurrency", "seed", "output_tokens_per_s", "proposer_mix", "mean_gamma",
        "mean_gamma_speculating", "speculation_share", "requests")


def profile_path(name: str) -> str:
    """A profile name (a benchmarks/profiles/*.yaml stem) or a YAML path -> the path sweep() loads."""
    if name.endswith((".yaml", ".yml")) and Path(name).exists():
        return str(Path(name).resolve())
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(PROFILE_DIR.glob("*.yaml")))
        raise SystemExit(f"unknown profile {name!r}; benchmarks/profiles has: {known}")
    return str(path)


def run_case(case: tuple) -> tuple[tuple, list[dict], float]:
    """One (seed, family, profile): the statics + oracle + adaptive (warm), then adaptive (cold). Slim rows."""
    seed, family, profile, n, conc, statics, oracle_n = case
    t0 = time.monotonic()
    prof = profile_path(profile)
    reqs = standin_traces.make(family, n, seed)
    wl = TraceWorkload(reqs, f"standin-{family}-{seed}", order="shuffle", seed=seed)  # `--trace-order shuffle`
    loads = [("concurrency", float(c)) for c in conc]
    rows = []
    for start, pols in (("warm", (*statics, "adaptive", "oracle")), ("cold", ("adaptive",))):
        specs = [parse_policy(p, prof, seed) for p in pols]
        for r in sweep(specs, prof, wl, loads, seed=seed, proposers=PROPOSERS, progress=False,
                       max_gamma=MAX_GAMMA, warm_start=start == "warm", calibrate=True):
            r = json.loads(json.dumps({k: r[k] for k in KEEP if k in r}, default=float))
            r["concurrency"] = int(r["concurrency"])
            r.update(profile=profile, family=family, start=start)
            rows.append(r)
    if oracle_n:  # issue 31 measures adaptive / oracle at the lowest level on >= 400 requests: a point of its own
        specs = [parse_policy(p, prof, seed) for p in ("adaptive", "oracle")]
        for r in sweep(specs, prof, wl, loads[:1], seed=seed, proposers=PROPOSERS, progress=False,
                       max_gamma=MAX_GAMMA, requests=oracle_n, calibrate=True):
            r = json.loads(json.dumps({k: r[k] for k in KEEP if k in r}, default=float))
            r.update(concurrency=int(r["concurrency"]), profile=profile, family=family, start="long")
            rows.append(r)
    return case, rows, time.monotonic() - t0


def mix_text(r: dict) -> str:
    """'off 35% + ngram 65%, gamma 3.2' from a row's proposer mix and mean gamma while speculating."""
    parts = [f"{'off' if p == 'none' else p} {v:.0%}" for p, v in sorted(r["proposer_mix"].items(), key=lambda kv: -kv[1]) if v >= 0.005]
    return " + ".join(parts) + f", gamma {r['mean_gamma_speculating']:.1f}"


def cells(rows: list[dict], profiles: list[str] | None = None) -> list[dict]:
    """One cell per (profile, family, seed, concurrency): adaptive warm / cold, best static, oracle, ratios.
    Ordered by `profiles` (default: by name), the family order of FAMILIES, seed, concurrency."""
    by: dict = {}
    for r in rows:
        key = (r["profile"], r["family"], r["seed"], r["concurrency"])
        name = {"cold": "adaptive-cold", "long": f"{r['policy']}-long"}.get(r["start"], r["policy"])
        by.setdefault(key, {})[name] = r
    prof_order = profiles or sorted({k[0] for k in by})
    fam_order = [*FAMILIES, *sorted({k[1] for k in by} - set(FAMILIES))]

    def order(key: tuple) -> tuple:
        profile, family, seed, c = key
        return prof_order.index(profile), fam_order.index(family), seed, c

    out = []
    for (profile, family, seed, c), got in sorted(by.items(), key=lambda kv: order(kv[0])):
        tps = {p: float(r["output_tokens_per_s"]) for p, r in got.items()}
        statics = {p: v for p, v in tps.items() if p == "off" or p.startswith("static:")}
        long = tps["adaptive-long"] / tps["oracle-long"] if tps.get("oracle-long") else None
        best = max(statics, key=statics.get)
        ad, cold = tps["adaptive"], tps["adaptive-cold"]
        cell = {"profile": profile, "family": family, "seed": seed, "concurrency": c,
                "adaptive": ad, "adaptive_cold": cold, "best_static": best, "best_static_tps": statics[best],
                "oracle": tps.get("oracle"), "statics": statics,
                "adaptive_over_best_static": ad / statics[best],
                "warm_over_cold": ad / cold if cold > 0 else float("nan"),
                "adaptive_over_oracle": ad / tps["oracle"] if tps.get("oracle") else None,
                "adaptive_over_oracle_long": long, "oracle_requests": got["oracle-long"].get("requests")
                if long is not None else None,
                "adaptive_ran": mix_text(got["adaptive"]), "adaptive_cold_ran": mix_text(got["adaptive-cold"]),
                "best_static_ran": mix_text(got[best])}
        if "oracle" in got:
            cell["oracle_ran"] = mix_text(got["oracle"])
        out.append(cell)
    return out


def acceptance(cl: list[dict]) -> dict:
    """The three targets: min, cells checked, the cells under target."""
    c1 = min(x["concurrency"] for x in cl)
    checks = {
        "adaptive_over_best_static": (TARGET_STATIC, cl),
        "warm_over_cold": (TARGET_COLD, cl),
        "adaptive_over_oracle": (TARGET_ORACLE, [x for x in cl if x["concurrency"] == c1
                                                 and x["adaptive_over_oracle"] is not None]),
        "adaptive_over_oracle_long": (TARGET_ORACLE, [x for x in cl if x["concurrency"] == c1
                                                      and x.get("adaptive_over_oracle_long") is not None]),
    }
    out = {}
    for key, (target, pool) in checks.items():
        vals = [x[key] for x in pool]
        under = sorted((x for x in pool if x[key] < target), key=lambda x: x[key])
        out[key] = {"target": target, "cells": len(pool), "min": min(vals) if vals else None,
                    "under": [{k: x[k] for k in ("profile", "family", "seed", "concurrency", key, "best_static",
                                                 "adaptive_ran", "adaptive_cold_ran", "best_static_ran",
                                                 "oracle_ran") if k in x} for x in under]}
        if key.startswith("adaptive_over_oracle"):
            out[key]["concurrency"] = c1
    return out


LABELS = {"adaptive_over_best_static": "adaptive (warm) / best static, every concurrency",
          "warm_over_cold": "warm / cold-start adaptive, every concurrency",
          "adaptive_over_oracle": "adaptive / per-request hindsight oracle at c={c} (the default window)",
          "adaptive_over_oracle_long": "adaptive / per-request hindsight oracle at c={c} on --oracle-requests "
                                       "(issue 31's measure)"}


def acceptance_text(acc: dict) -> list[str]:
    lines = ["## Acceptance", ""]
    for key, a in acc.items():
        label = LABELS[key].format(c=a.get("concurrency"))
        ok = a["min"] is not None and a["min"] >= a["target"]
        mn = "-" if a["min"] is None else f"{a['min']:.3f}"
        lines.append(f"- {label}: min **{mn}** (target >= {a['target']}): {'PASS' if ok else 'FAIL'}, "
                     f"{len(a['under'])} of {a['cells']} cells under target")
    for key, a in acc.items():
        if not a["under"]:
            continue
        lines += ["", f"### Under target: {LABELS[key].format(c=a.get('concurrency'))} (< {a['target']})", ""]
        if key == "adaptive_over_best_static":
            lines += ["| profile | family | seed | c | ratio | best static | adaptive ran | best static ran |",
                      "|---|---|---:|---:|---:|---|---|---|"]
            lines += [f"| {x['profile']} | {x['family']} | {x['seed']} | {x['concurrency']} | {x[key]:.3f} | "
                      f"{x['best_static']} | {x['adaptive_ran']} | {x['best_static_ran']} |" for x in a["under"]]
        elif key == "warm_over_cold":
            lines += ["| profile | family | seed | c | warm / cold | best static | warm ran | cold ran |",
                      "|---|---|---:|---:|---:|---|---|---|"]
            lines += [f"| {x['profile']} | {x['family']} | {x['seed']} | {x['concurrency']} | {x[key]:.3f} | "
                      f"{x['best_static']} | {x['adaptive_ran']} | {x['adaptive_cold_ran']} |" for x in a["under"]]
        else:
            lines += ["| profile | family | seed | c | adaptive / oracle | best static | adaptive ran | oracle ran |",
                      "|---|---|---:|---:|---:|---|---|---|"]
            lines += [f"| {x['profile']} | {x['family']} | {x['seed']} | {x['concurrency']} | {x[key]:.3f} | "
                      f"{x['best_static']} | {x['adaptive_ran']} | {x.get('oracle_ran', '-')} |"
                      for x in a["under"]]
    return lines


def _fmt(v: float | None, target: float) -> str:
    if v is None:
        return "-"
    s = f"{v:.3f}"
    return f"**{s}**" if v < target else s


def markdown(cl: list[dict], acc: dict, meta: dict) -> str:
    conc = meta["concurrency"]
    c1 = conc[0]
    lines = ["# Learning harness: adaptive vs the best static, warm vs cold start (issue 31 item 5)", "",
             "```bash", meta["command"], "```", "",
             f"Commit {meta['commit']}; {meta['elapsed_s']:.0f} s with {meta['jobs']} job(s). Seeds {meta['seeds']}; "
             f"stand-in families {meta['families']} ({meta['n']} requests each, trace seed = seed, shuffled "
             f"replay); profiles {meta['profiles']}; proposers {','.join(PROPOSERS)}; concurrency "
             f"{','.join(map(str, conc))} (lowest first; warm = learning carried over point to point, cold = "
             "`--cold-start`; at the first point both start from the priors, so W/C there is 1 by construction); default "
             "windows (`max(64, 6c)` measured completions after `max(32, 2c)` discarded: the c=1 oracle ratio is on "
             "64 requests; `long`: adaptive and the oracle once more at c=1 on `--oracle-requests`); calibration on; "
             "max gamma "
             f"{MAX_GAMMA}. Statics: {', '.join(meta['statics'])}.", "",
             f"Per column: adaptive (warm) / best static (`A/S`), warm / cold adaptive (`W/C`), adaptive / "
             f"oracle at c={c1} (`A/O`). **Bold**: under target ({TARGET_STATIC}, {TARGET_COLD}, {TARGET_ORACLE}).",
             "",
             "| profile | family | seed | " + " | ".join(f"A/S c={c}" for c in conc) + " | "
             + " | ".join(f"W/C c={c}" for c in conc) + f" | A/O c={c1} | A/O c={c1}, long |",
             "|---|---|---:|" + "---:|" * (2 * len(conc) + 2)]
    by: dict = {}
    for x in cl:
        by.setdefault((x["profile"], x["family"], x["seed"]), {})[x["concurrency"]] = x
    for (profile, family, seed), row in by.items():
        a_s = [_fmt(row[c]["adaptive_over_best_static"] if c in row else None, TARGET_STATIC) for c in conc]
        w_c = [_fmt(row[c]["warm_over_cold"] if c in row else None, TARGET_COLD) for c in conc]
        a_o = _fmt(row[c1]["adaptive_over_oracle"] if c1 in row else None, TARGET_ORACLE)
        a_l = _fmt(row[c1].get("adaptive_over_oracle_long") if c1 in row else None, TARGET_ORACLE)
        lines.append(f"| {profile} | {family} | {seed} | " + " | ".join(a_s) + " | " + " | ".join(w_c)
                     + f" | {a_o} | {a_l} |")
    lines += ["", *acceptance_text(acc)]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The commit the run starts from (`+dirty` when adaptspec/ has uncommitted changes)."""
    try:
        def git(*a: str) -> str:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

        return (git("log", "-1", "--format=%h") or "?") + ("+dirty" if git("status", "--porcelain", "adaptspec")
                                                           else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _progress(i: int, total: int, case: tuple, rows: list[dict], dt: float, t0: float) -> None:
    seed, family, profile = case[:3]
    cl = cells(rows)
    sys.stdout.write(f"[{i}/{total}] {profile} {family} seed={seed}: "
                     + " ".join(f"c{x['concurrency']}={x['adaptive_over_best_static']:.3f}"
                                f"/{x['warm_over_cold']:.3f}" for x in cl)
                     + f"  ({dt:.1f}s, total {time.monotonic() - t0:.0f}s)\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"of {', '.join(FAMILIES)}")
    ap.add_argument("--profiles", default=DEFAULT_PROFILES,
                    help="benchmarks/profiles/*.yaml stems or YAML paths (default %(default)s; all: "
                    + ",".join(p.stem for p in sorted(PROFILE_DIR.glob("*.yaml"))) + ")")
    ap.add_argument("--concurrency", default="1,8,32,128", help="run in this order, lowest first")
    ap.add_argument("--statics", default=",".join(STATICS), help="the static policies (incl. off)")
    ap.add_argument("--n", type=int, default=600, help="requests per stand-in trace (default 600)")
    ap.add_argument("--jobs", type=int, default=1, help="(seed, family, profile) cases in parallel processes")
    ap.add_argument("--oracle-requests", type=int, default=400,
                    help="adaptive and the oracle once more at the lowest concurrency on this many measured requests "
                         "(issue 31: >= 400; 0: skip)")
    ap.add_argument("--json", default=None, help="write the cells and the acceptance block as JSON")
    ap.add_argument("--md", default=None, help="write the markdown summary")
    ap.add_argument("--render", default=None, help="only re-render the summary of an earlier --json file")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(Path(args.render).read_text())
        cl, acc = data.pop("cells"), data.pop("acceptance")
        return _emit(args, markdown(cl, acc, data), data, cl, acc)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in standin_traces.FAMILIES]
    if bad:
        ap.error(f"unknown families {bad}; of {sorted(standin_traces.FAMILIES)}")
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    for p in profiles:
        profile_path(p)
    conc = [int(c) for c in args.concurrency.split(",") if c.strip()]
    statics = tuple(s.strip() for s in args.statics.split(",") if s.strip())
    for s in statics:
        if s != "off" and not s.startswith("static:"):
            ap.error(f"--statics: {s!r} is not off or static:<proposer>:<gamma>")
        if s.startswith("static:") and int(s.rsplit(":", 1)[1]) > MAX_GAMMA:
            ap.error(f"--statics: {s!r} exceeds max gamma {MAX_GAMMA}")
    work = [(seed, fam, prof, args.n, tuple(conc), statics, args.oracle_requests) for seed in seeds
            for fam in families for prof in profiles]
    rows: list[dict] = []
    commit = _commit()
    t0 = time.monotonic()
    if args.jobs > 1 and len(work) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(min(args.jobs, len(work))) as pool:
            for i, (case, got, dt) in enumerate(pool.imap_unordered(run_case, work), 1):
                rows += got
                _progress(i, len(work), case, got, dt, t0)
    else:
        for i, case in enumerate(work, 1):
            case, got, dt = run_case(case)
            rows += got
            _progress(i, len(work), case, got, dt, t0)
    elapsed = time.monotonic() - t0
    cl = cells(rows, profiles)
    acc = acceptance(cl)
    command = "python benchmarks/sim_learning.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "commit": commit, "elapsed_s": elapsed, "jobs": args.jobs, "seeds": seeds,
            "families": families, "profiles": profiles, "n": args.n, "concurrency": conc, "statics": list(statics),
            "proposers": list(PROPOSERS), "max_gamma": MAX_GAMMA}
    return _emit(args, markdown(cl, acc, meta), meta, cl, acc)


def _emit(args, text: str, meta: dict, cl: list[dict], acc: dict) -> int:
    sys.stdout.write("\n" + text)
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        Path(args.md).write_text(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**meta, "cells": cl, "acceptance": acc}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the reference worker's own windows say a drafted token costs (docs/results/calibration.md, 2026-12-02).

Weighted least squares (each window's per-step means weighted by its steps, as control/calibration.py weights
them) of the worker's wall seconds per step on [1, batched tokens, KV tokens, draft passes, drafted tokens] per
step, over the idle-box windows of 2026-12-02 00:47 (calibration-cpu-tiny-worker-quiet.json: no speculation at
1/8/16/32 clients, draft k=2/4 and n-gram k=4 at 1 and 32 clients): with every window, i.e. speculation varied at
a fixed batch, and with the no-speculation windows alone, i.e. traffic whose batched and KV tokens grow together.

    python benchmarks/calibration_drafted_price.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COLS = ("batched_per_step", "kv_per_step", "draft_passes_per_step", "drafted_per_step")
NAMES = ("overhead ms", "per batched token ms", "per KV token us", "per draft pass ms", "per drafted token ms")
SCALE = (1e3, 1e3, 1e6, 1e3, 1e3)


def fit(windows: list[dict], cols: tuple[str, ...]) -> np.ndarray:
    x = np.array([[1.0] + [w.get(c, 0.0) for c in cols] for w in windows])  # [windows, 1 + len(cols)]
    y = np.array([w["wall_ms"] / 1e3 for w in windows])  # [windows] seconds per step
    sw = np.sqrt(np.array([w["steps"] for w in windows]))  # [windows]
    return np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)[0]


def main() -> None:
    windows = json.loads((HERE / "results" / "cpu-tiny-profile" / "calibration-cpu-tiny-worker-quiet.json").read_text())["windows"]
    fits = {"every window (speculation varied at fixed batches)": (fit(windows, COLS), COLS),
            "no-speculation windows only": (fit([w for w in windows if w["speculation"] == "none"], COLS[:2]),
                                            COLS[:2])}
    out = ["| windows | " + " | ".join(NAMES) + " |", "|---|" + "---|" * len(NAMES)]
    for name, (b, cols) in fits.items():
        vals = [f"{b[i] * SCALE[i]:.4g}" if i <= len(cols) else "-" for i in range(len(NAMES))]
        out.append(f"| {name} | " + " | ".join(vals) + " |")
    tiny = (5.11, 0.494, 2.43, 2.51, 0.038)
    out.append("| cpu-tiny (the profile) | " + " | ".join(f"{v:g}" for v in tiny) + " |")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

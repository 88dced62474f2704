"""Measurement only (docs/results/calibration.md, "The drafted token's price"): with this directory first on
PYTHONPATH, every StepCalibrator is built with probe_steps = $PROBE_STEPS (0: no calibration probes), so that
`adaptspec simulate` and benchmarks/sim_calibration.sh run without probes on the same code:

    OUT=/tmp/noprobes PY="env PROBE_STEPS=0 PYTHONPATH=benchmarks/calibration_probes_off:$PWD python" \
        bash benchmarks/sim_calibration.sh
"""

import os

if "PROBE_STEPS" in os.environ:
    from adaptspec.control import calibration as _calibration

    _post_init = _calibration.StepCalibrator.__post_init__

    def _with_probe_steps(self) -> None:
        self.probe_steps = float(os.environ["PROBE_STEPS"])
        _post_init(self)

    _calibration.StepCalibrator.__post_init__ = _with_probe_steps

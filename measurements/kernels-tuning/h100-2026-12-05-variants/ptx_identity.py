"""The landed `recompute` kernel (kernels/prefill.py) against the probe copy's `_recompute_wku_fn` that the
H100 timed (prefill_wku.py; it and tuned_old.py come from ../cpu-2026-12-05-recompute-phases/ and the folder
given as the first argument): Helion's code for both at the default config, compiled by Triton for sm_90a on
this CPU, PTX compared with names, line info and debug sections left out.

    python ptx_identity.py .carry/calls
"""
import os
import re
import sys
import tempfile

import torch
from kdakit.kernels import prefill
from kdakit.kernels.tools import ptxas as P

sys.path.insert(0, sys.argv[1])
import prefill_wku  # noqa: E402


def body(ptx_path: str) -> list[str]:
    text = open(ptx_path).read().split(".section")[0]  # the code, not the DWARF sections
    text = re.sub(r"recompute_wku_fn|recompute_fn|wku|recompute", "K", text)
    return [ln for ln in text.splitlines() if not re.match(r"\s*(\.loc|\.file|//)", ln)]


args = P.example_args()["recompute"]
with tempfile.TemporaryDirectory() as landed_dir, tempfile.TemporaryDirectory() as probe_dir:
    print("landed:", P.report("recompute", args, landed_dir))
    prefill._kernels["wku"] = prefill_wku._wku_kernel()
    prefill._FNS["wku"] = prefill_wku._recompute_wku_fn
    print("probe: ", P.report("wku", args, probe_dir))
    landed = body(os.path.join(landed_dir, "recompute.ptx"))
    probe = body(os.path.join(probe_dir, "wku.ptx"))
differ = sum(a != b for a, b in zip(landed, probe)) + abs(len(landed) - len(probe))
print(f"PTX code lines: landed {len(landed)}, probe {len(probe)}; lines that differ: {differ}")
import triton  # noqa: E402
print("torch", torch.__version__, "triton", triton.__version__)

"""The state pass's dot loop in SASS (sm_90a, on the CPU) for main and for the variant: python sass_loops.py
VARIANT, VARIANT being kernels/prefill.py with transition.diff's prefill part applied."""
import importlib.util
import sys
import tempfile

from kdakit.kernels import prefill
from kdakit.kernels.tools import ptxas

spec = importlib.util.spec_from_file_location("prefill_tr", sys.argv[1])
variant = importlib.util.module_from_spec(spec)
sys.modules["prefill_tr"] = variant  # Helion resolves the kernel's globals through its module
spec.loader.exec_module(variant)
args = ptxas.example_args()
for name, module in (("main", prefill), ("transition", variant)):
    with tempfile.TemporaryDirectory() as workdir:
        print(name, ptxas.loop_report("state", args["state"], workdir, module=module))

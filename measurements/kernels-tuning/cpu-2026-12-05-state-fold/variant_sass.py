"""Usage: variant_sass.py MODULES [CONFIGS_JSON]. For each prefill module (kdakit.kernels.prefill, or a variant
beside this file): ptxas's registers, spills and shared memory of recompute and the state pass for sm_90a, and
the SASS of their innermost tensor-core loop (kdakit.kernels.tools.ptxas), at the module defaults and at each
config set of the JSON list (only the kernels it names)."""
import importlib, json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kdakit.kernels.tools import ptxas
import fold_ptxas_args as FA

mods = [importlib.import_module(m) for m in sys.argv[1].split(",")]
for cfg in [{}] + (json.loads(sys.argv[2]) if len(sys.argv) > 2 else []):
    for mod in mods:
        mod.configure(cfg)
        with tempfile.TemporaryDirectory() as wd:
            for name, args in (("recompute", FA.recompute_args(mod)), ("state", FA.state_args(mod))):
                if not cfg or name in cfg:
                    print(f"{mod.__name__:24s}", ptxas.report(name, args, wd, mod), flush=True)
                    print(f"{mod.__name__:24s}", ptxas.loop_report(name, args, wd, mod), flush=True)

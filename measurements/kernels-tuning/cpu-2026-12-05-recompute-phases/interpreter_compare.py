# The record's CPU check, as it ran (paths of this machine): main's chunk_kda (the installed kdakit) against a
# probe copy in .carry/calls (VARIANT=prefill_wku or prefill_ipairs) under the interpreter, each checked against
# the fp64 reference by tests/kernels/test_prefill.py's check().
"""CPU check: prefill_wku.chunk_kda (merged recompute) against main's chunk_kda and the fp64 reference."""
import os, sys
sys.path.insert(0, "/work/main/.carry/calls"); sys.path.insert(0, "/work/main/tests/kernels")
import torch
from kdakit.kernels.tools.testing import interpreter
with interpreter():
    prefill_wku = __import__(os.environ.get("VARIANT", "prefill_wku"))
    import test_prefill as T
    from kdakit.kernels import prefill
    for KV, lens, hv in (((32, 32), [17, 1, 63, 64, 65, 130], 2), ((64, 64), [70, 130], 2), ((32, 64), [100], 4), ((64, 32), [90], 2)):
        T.K, T.V = KV
        x = T.make(lens, seed=3, H=2, HV=hv)
        outs = []
        for mod in [m for m in (prefill, prefill_wku) if os.environ.get("ONLY", "both") in ("both", m.__name__.split(".")[-1])]:
            q, k, v, pool = x["q"], x["k"], x["v"].clone(), x["pool"].clone()
            o = mod.chunk_kda(q, k, v, x["g"], x["beta"], initial_state=pool, initial_state_indices=x["idx"],
                              use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                              lower_bound=-5.0, beta_is_raw=True)
            outs.append((o.float().clone(), pool.clone()))
            T.check(x, o, pool, lower_bound=-5.0)
        print(KV, lens, "ok", flush=True) if len(outs) == 1 else print(KV, lens, "out diff", float((outs[0][0] - outs[1][0]).abs().max()), "state diff", float((outs[0][1] - outs[1][1]).abs().max()), flush=True)

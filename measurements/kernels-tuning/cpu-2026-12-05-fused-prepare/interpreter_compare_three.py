import importlib.util, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from kdakit.kernels.tools import interpret
interpret.install()
sys.path.insert(0, "/work/main/.carry/calls")
import torch
import prefill_half, prefill_old
from kdakit.kernels import prefill
exec(open("/work/scratch/fz/cmp.py").read().split("for lens, lb, ds in")[0].split("spec = importlib")[0])
def make(lens, H=2, HV=2, K=32, V=32, seed=0, decay_scale=0.0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens); n = len(lens)
    r = lambda *s, sc=1.0, dt=torch.bfloat16: (torch.randn(*s, generator=gen) * sc).to(dt)
    return dict(q=r(1, T, H, K), k=r(1, T, H, K), v=r(1, T, HV, V), g=r(1, T, HV, K), beta=r(1, T, HV),
                A_log=r(HV, sc=0.5, dt=torch.float32) + decay_scale, dt_bias=r(HV * K, sc=0.3, dt=torch.float32),
                pool=r(2 * n + 1, HV, V, K, sc=0.3, dt=torch.float32), idx=torch.tensor([2 * i + 1 for i in range(n)]),
                cu=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32))
def run(mod, x, lb=None):
    pool = x["pool"].clone(); v = x["v"].clone()
    o = mod.chunk_kda(x["q"], x["k"], v, x["g"], x["beta"], initial_state=pool, initial_state_indices=x["idx"],
                      use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                      lower_bound=lb, beta_is_raw=True)
    return o.float(), pool
for lens, lb, ds in [([100, 37, 64], None, 0.0), ([130], -10.0, 0.0), ([70, 20], None, 3.0)]:
    x = make(lens, decay_scale=ds)
    oo, po = run(prefill_old, x, lb)
    for name, mod in (("integrated", prefill), ("halves", prefill_half)):
        on, pn = run(mod, x, lb)
        print(name, lens, lb, ds, "out diff", float((on - oo).abs().max()), "max", float(oo.abs().max()),
              "state diff", float((pn - po).abs().max()), "finite", bool(torch.isfinite(on).all()), flush=True)

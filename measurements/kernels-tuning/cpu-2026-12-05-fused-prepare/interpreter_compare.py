import importlib.util, os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
from kdakit.kernels.tools import interpret
interpret.install()
import torch
from kdakit.kernels import prefill

spec = importlib.util.spec_from_file_location("prefill_old", "/work/main/kernels/prefill.py")
old = importlib.util.module_from_spec(spec); sys.modules["prefill_old"] = old; spec.loader.exec_module(old)

def make(lens, H=2, HV=2, K=32, V=32, seed=0, gate="softplus", decay_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    r = lambda *s, sc=1.0, dt=torch.bfloat16: (torch.randn(*s, generator=gen) * sc).to(dt)
    n = len(lens)
    return dict(q=r(1, T, H, K), k=r(1, T, H, K), v=r(1, T, HV, V), g=r(1, T, HV, K), beta=r(1, T, HV),
                A_log=r(HV, sc=0.5, dt=torch.float32) + decay_scale, dt_bias=r(HV * K, sc=0.3, dt=torch.float32),
                pool=r(2 * n + 1, HV, V, K, sc=0.3, dt=torch.float32),
                idx=torch.tensor([2 * i + 1 for i in range(n)]),
                cu=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32))

def run(mod, x, lower_bound=None):
    pool = x["pool"].clone()
    v = x["v"].clone()
    o = mod.chunk_kda(x["q"], x["k"], v, x["g"], x["beta"], initial_state=pool, initial_state_indices=x["idx"],
                      use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                      lower_bound=lower_bound, beta_is_raw=True)
    return o.float(), pool

for lens, lb, ds in [([64], None, 0.0), ([100, 37, 64], None, 0.0), ([130], -5.0, 0.0), ([70, 20], None, 3.0)]:
    x = make(lens, decay_scale=ds)
    t = time.time()
    on, pn = run(prefill, x, lb)
    t1 = time.time()
    oo, po = run(old, x, lb)
    print(lens, lb, ds, "out diff", float((on - oo).abs().max()), "max", float(oo.abs().max()),
          "state diff", float((pn - po).abs().max()), "finite", bool(torch.isfinite(on).all()),
          f"new {t1-t:.1f}s old {time.time()-t1:.1f}s", flush=True)

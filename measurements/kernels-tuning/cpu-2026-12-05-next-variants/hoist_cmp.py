"""Usage: python3 -P hoist_cmp.py [cpu|cuda]. main (working-tree kdakit.kernels.prefill) vs prefill_hoist on identical inputs, CPU interpreter: the intra
kernel's outputs (akk, aqk, rnorm_q, rnorm_k; unwritten entries kept at a sentinel) and chunk_kda's output/state."""
import contextlib, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from kdakit.kernels.tools.testing import interpreter
DEV = sys.argv[1] if len(sys.argv) > 1 else "cpu"  # cuda: on the GPU host (after `import kda_stubs`)
if DEV == "cuda":
    import kda_stubs  # noqa: F401

SENT = 12345.0


def capture(mod, store):
    real = mod._kernels_for

    def patched(bucket, device):
        ks = dict(real(bucket, device))
        intra = ks["intra"]

        def wrapped(*args):
            for i in (4, 5, 9, 10):
                args[i].fill_(SENT)
            r = intra(*args)
            store.update(rnorm_q=args[4].clone(), rnorm_k=args[5].clone(), akk=args[9].clone(), aqk=args[10].float().clone())
            return r
        ks["intra"] = wrapped
        return ks
    mod._kernels_for = patched


def case(name, lens, H, HV, K, V, a_log=None, kscale=1.0, l2norm=True, gate=True, lower_bound=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    rnd = lambda *s, sc=1.0, dt=torch.bfloat16: (torch.randn(*s, generator=gen) * sc).to(dt)
    q, k, v = rnd(1, T, H, K), rnd(1, T, H, K, sc=kscale), rnd(1, T, HV, V)
    g, beta = rnd(1, T, HV, K), rnd(1, T, HV)
    A_log = rnd(HV, sc=0.5, dt=torch.float32) if a_log is None else torch.full((HV,), a_log)
    dt_bias = rnd(HV * K, sc=0.3, dt=torch.float32)
    pool = rnd(2 * len(lens) + 1, HV, V, K, sc=0.3, dt=torch.float32)
    idx = torch.tensor([2 * i + 1 for i in range(len(lens))])
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    q, k, v, g, beta, A_log, dt_bias, pool, idx, cu = (t.to(DEV) for t in (q, k, v, g, beta, A_log, dt_bias, pool, idx, cu))
    if not gate:
        from kdakit.kernels import reference as R
        g = R.kda_gate(g, A_log, dt_bias, lower_bound).float()
    res = {}
    for mname, mod in mods.items():
        st = {}
        capture(mod, st)
        p = pool.clone()
        o = mod.chunk_kda(q, k, v.clone(), g, beta, initial_state=p, initial_state_indices=idx,
                          use_qk_l2norm_in_kernel=l2norm, cu_seqlens=cu,
                          A_log=A_log if gate else None, dt_bias=dt_bias if gate else None,
                          lower_bound=lower_bound, beta_is_raw=True)
        st.update(out=o.float(), pool=p)
        res[mname] = st
    a, b = res["main"], res["hoist"]
    parts = []
    for key in ("akk", "aqk", "rnorm_q", "rnorm_k", "out", "pool"):
        x, y = a[key], b[key]
        same = torch.equal(torch.nan_to_num(x, nan=-7.0), torch.nan_to_num(y, nan=-7.0))
        d = (x - y).abs().nan_to_num(0.0).max().item()
        parts.append(f"{key}: {'bit-identical' if same else f'max|d|={d:.3g}'}")
    fin = torch.isfinite(b["out"]).all().item()
    print(f"{name}: " + ", ".join(parts) + f", finite={fin}", flush=True)


with (interpreter() if DEV == "cpu" else contextlib.nullcontext()):
    from kdakit.kernels import prefill as main
    import prefill_hoist as hoist
    mods = {"main": main, "hoist": hoist}
    case("1x130 H2 HV2 K=V=128 softplus", [130], 2, 2, 128, 128)
    case("1x130 H2 HV2 K=V=128 bounded(-5)", [130], 2, 2, 128, 128, lower_bound=-5.0, seed=1)
    case("extreme A_log=6 k*6 1x130 K=V=128", [130], 2, 2, 128, 128, a_log=6.0, kscale=6.0, seed=11)
    case("extreme A_log=3 k*6 1x80 K=V=128", [80], 2, 2, 128, 128, a_log=3.0, kscale=6.0, seed=11)
    case("varlen [17,70,130] H2 HV4 K=V=64 no-l2 preact", [17, 70, 130], 2, 4, 64, 64, l2norm=False, gate=False, lower_bound=-5.0, seed=3)

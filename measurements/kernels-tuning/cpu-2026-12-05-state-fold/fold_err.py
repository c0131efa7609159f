"""Usage: python3 -P fold_err.py [cpu|cuda] [VARIANTS]. main (installed kdakit.kernels.prefill) and each
variant module beside this file (default: prefill_fold) against the fp64 recurrence on the same inputs: max
|error| of the output and the final states, and max |variant - main|. CPU: the Triton interpreter."""
import contextlib, importlib, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from kdakit.kernels import reference as R
from kdakit.kernels import tuned
from kdakit.kernels.tools.testing import interpreter
DEV = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if DEV == "cuda":
    import kda_stubs  # noqa: F401


def case(label, lens, H, HV, K, V, a_log=None, kscale=1.0, lower_bound=-5.0, seed=0):
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
    dev = lambda t: t.to(DEV)
    g_log = R.kda_gate(dev(g), dev(A_log), dev(dt_bias), lower_bound)
    bsig = torch.sigmoid(dev(beta).double())
    ref_o, ref_s, s = [], [], 0
    for n, e in enumerate(cu[1:].tolist()):
        o, states = R.kda_recurrence(dev(q[0, s:e]), dev(k[0, s:e]), dev(v[0, s:e]), g_log[0, s:e],
                                     bsig[0, s:e], dev(pool[int(idx[n])]).double(), K**-0.5, True)
        ref_o.append(o.cpu()); ref_s.append(states[-1].cpu()); s = e
    ref_o = torch.cat(ref_o)
    res = {}
    for mname, mod in mods.items():
        tuned.reset()  # each module's own default configs (the selection cache is shared by kernel name)
        p = dev(pool.clone())
        o = mod.chunk_kda(dev(q), dev(k), dev(v.clone()), dev(g), dev(beta), initial_state=p,
                          initial_state_indices=dev(idx), use_qk_l2norm_in_kernel=True, cu_seqlens=dev(cu),
                          A_log=dev(A_log), dt_bias=dev(dt_bias), lower_bound=lower_bound, beta_is_raw=True)
        o, p = o[0].double().cpu(), p.double().cpu()
        fin = torch.stack([p[int(i)] for i in idx])
        res[mname] = (o, fin, (o - ref_o).abs().max().item(), (fin - torch.stack(ref_s)).abs().max().item())
    om, sm, eom, esm = res["main"]
    for name in variants:
        of, sf, eof, esf = res[name]
        print(f"{name} {label}: |o|max={ref_o.abs().max().item():.3g} out err main {eom:.3g} {name} {eof:.3g}; "
              f"state err main {esm:.3g} {name} {esf:.3g}; {name}-main out {(of - om).abs().max().item():.3g} "
              f"state {(sf - sm).abs().max().item():.3g}; finite={bool(torch.isfinite(of).all())}", flush=True)

with (interpreter() if DEV == "cpu" else contextlib.nullcontext()):
    from kdakit.kernels import prefill as main
    variants = (sys.argv[2] if len(sys.argv) > 2 else "prefill_fold").split(",")
    mods = {"main": main, **{name: importlib.import_module(name) for name in variants}}
    big = DEV == "cuda"
    case("1x130 H2 HV2 K=V=128 bounded", [130], 2, 2, 128, 128, seed=1)
    case("1x130 H2 HV2 K=V=128 softplus", [130], 2, 2, 128, 128, lower_bound=None)
    case("extreme A_log=6 k*6 1x130 K=V=128", [130], 2, 2, 128, 128, a_log=6.0, kscale=6.0, lower_bound=None, seed=11)
    case("varlen [1,17,70,130] H2 HV4 K=V=64", [1, 17, 70, 130], 2, 4, 64, 64, seed=3)
    if big:
        case("1x4096 H16 HV16 K=V=128 bounded", [4096], 16, 16, 128, 128, seed=5)
        case("8x512 H16 HV16 K=V=128 bounded", [512] * 8, 16, 16, 128, 128, seed=6)

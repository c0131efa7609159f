"""CPU dry run of qprobe.py's plumbing (as it ran on this machine): CPU inputs, the interpreter, a stub timer."""
import os, sys, types, json
sys.path.insert(0, "/work/main/.carry/calls")
from kdakit.kernels.tools.testing import interpreter
with interpreter():
    import torch
    sys.modules["kda_stubs"] = types.ModuleType("kda_stubs")
    torch.cuda.synchronize = lambda *a, **k: None
    from kdakit.kernels.tools import profile, bench
    def _inputs(batch, tokens, heads):
        cfg = bench.BenchConfig(heads=heads, value_heads=heads)
        gen = torch.Generator().manual_seed(0)
        total, K = batch * tokens, cfg.head_dim
        A_log, dt_bias = torch.randn(heads, generator=gen) * 0.5, torch.randn(heads * K, generator=gen) * 0.3
        qkv0 = torch.randn(total, 3 * heads * K, generator=gen).to(torch.bfloat16)
        return {"cfg": cfg, "A_log": A_log, "dt_bias": dt_bias, "qkv0": qkv0,
                "x": {"qkv": qkv0.clone(), "g": torch.randn(1, total, heads, K, generator=gen).to(torch.bfloat16),
                      "beta": torch.randn(1, total, heads, generator=gen).to(torch.bfloat16)},
                "pool0": torch.randn(4 * batch, heads, K, K, generator=gen) * 0.05,
                "idx": torch.arange(batch, 2 * batch, dtype=torch.int32),
                "cu": torch.arange(0, total + 1, tokens, dtype=torch.int32)}
    profile._inputs = _inputs
    profile.kernel_times = lambda call, n: (call(), {"stub_kernel": 1.0})[1]
    import qprobe
    qprobe.main(sys.argv[1].split(","), sys.argv[2])

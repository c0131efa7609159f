"""How long is the state pass's chain per token when a step covers 128 tokens instead of 64? A timing toy,
not a kit kernel: one sequence, every tile full, the state pass's step as kernels/prefill.py writes it
(operands loaded at the step's top, W S, v_new, the state update, then the output), with the step's token
count C and the output's form as parameters:
- `aqk`: o = qg S + Aqk v_new, as main (Aqk is C x C);
- `qprime`: o = Q' S + (Aqk U), Q' = qg - Aqk W and Aqk U made per chunk before the pass (three products a
  step instead of four; a C = 128 step with Aqk would need 132 KiB of operands a stage).
A C = 128 step needs its operands from a pre-pass that merges two 64-token chunks (`pairs.py` checks that
algebra); this toy takes random operands of the right shapes, since only the time is asked.

    python state_steps.py check            # CPU, the Triton interpreter: the toy against a torch loop
    python state_steps.py time OUT.jsonl   # GPU: main's step shape and the variants, 1x4096 at 16 and 8 heads
"""

import json
import os
import sys

if len(sys.argv) > 1 and sys.argv[1] == "check":
    os.environ.setdefault("TRITON_INTERPRET", "1")
import helion
import helion.language as hl
import torch


def _step_fn(
    w_rows: torch.Tensor,  # [T*HV, K] bf16
    kg_rows: torch.Tensor,  # [T*HV, K] bf16
    qg_rows: torch.Tensor,  # [T*HV, K] bf16 (qg, or Q')
    aqk_rows: torch.Tensor,  # [T*HV, C] bf16 (read only in the aqk form)
    u_rows: torch.Tensor,  # [T, HV*V] bf16
    au_rows: torch.Tensor,  # [T, HV*V] bf16: Aqk U (read only in the qprime form)
    o_rows: torch.Tensor,  # [T, HV*V] bf16 out
    decay_flat: torch.Tensor,  # [(T/C)*HV*K] fp32
    state_rows: torch.Tensor,  # [HV*V, K] fp32, updated in place
    QPRIME: hl.constexpr,
    HV: hl.constexpr,
) -> torch.Tensor:
    K = hl.specialize(w_rows.size(1))
    C = hl.specialize(aqk_rows.size(1))
    V = hl.specialize(u_rows.size(1)) // HV
    T = u_rows.size(0)
    block_v = hl.register_block_size(16, V)
    hl.specialize((w_rows.stride(0), kg_rows.stride(0), qg_rows.stride(0), aqk_rows.stride(0)))
    hl.specialize((u_rows.stride(0), au_rows.stride(0), o_rows.stride(0), state_rows.stride(0)))
    for tile_h, tile_v in hl.tile([HV, V], block_size=[1, block_v]):
        hv = tile_h.id
        kk = hl.arange(K)
        cols_c = hl.arange(C)
        s_row = hv * V + tile_v.index
        state = hl.load(state_rows, [s_row[None, :], kk[:, None]])
        decay_next = hl.load(decay_flat, [hv * K + kk])
        for tile_t in hl.tile(T, block_size=C):
            decay = decay_next
            has_next = (tile_t.id + 1) * C < T
            decay_next = hl.load(decay_flat, [((tile_t.id + 1) * HV + hv) * K + kk], extra_mask=has_next)
            token = tile_t.index
            row = token * HV + hv
            v_cols = hv * V + tile_v.index
            w = hl.load(w_rows, [row[:, None], kk[None, :]])
            kg_t = hl.load(kg_rows, [row[None, :], kk[:, None]])
            qg = hl.load(qg_rows, [row[:, None], kk[None, :]])
            u = hl.load(u_rows, [token[:, None], v_cols[None, :]]).float()
            state_b = state.to(torch.bfloat16)
            v_new = (u - hl.dot(w, state_b, out_dtype=torch.float32)).to(torch.bfloat16)
            state = state * decay[:, None] + hl.dot(kg_t, v_new, out_dtype=torch.float32)
            if QPRIME:
                au = hl.load(au_rows, [token[:, None], v_cols[None, :]]).float()
                o = hl.dot(qg, state_b, out_dtype=torch.float32) + au
            else:
                aqk = hl.load(aqk_rows, [row[:, None], cols_c[None, :]])
                o = hl.dot(qg, state_b, out_dtype=torch.float32) + hl.dot(aqk, v_new, out_dtype=torch.float32)
            hl.store(o_rows, [token[:, None], v_cols[None, :]], o.to(o_rows.dtype))
        hl.store(state_rows, [s_row[None, :], kk[:, None]], state)
    return o_rows


def kernel(stages: int, block_v: int = 16, warps: int = 4):
    config = helion.Config(block_sizes=[block_v], num_warps=warps, num_stages=stages, indexing="pointer")
    return helion.kernel(_step_fn, static_shapes=True, config=config)


def inputs(T: int, HV: int, K: int, V: int, C: int, device, seed: int = 0) -> dict:
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    bf = torch.bfloat16
    return {
        "w_rows": rnd(T * HV, K, scale=0.05).to(bf),
        "kg_rows": rnd(T * HV, K, scale=0.05).to(bf),
        "qg_rows": rnd(T * HV, K, scale=0.05).to(bf),
        "aqk_rows": rnd(T * HV, C, scale=0.05).to(bf),
        "u_rows": rnd(T, HV * V).to(bf),
        "au_rows": rnd(T, HV * V).to(bf),
        "o_rows": torch.zeros(T, HV * V, dtype=bf, device=device),
        "decay_flat": torch.rand(T // C * HV * K, generator=g).mul(0.1).add(0.9).to(device),
        "state_rows": rnd(HV * V, K, scale=0.1),
    }


def reference(x: dict, HV: int, C: int, qprime: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The toy's arithmetic as a torch loop (bf16 roundings where the kernel rounds, fp32 products)."""
    T, K = x["u_rows"].size(0), x["w_rows"].size(1)
    V = x["u_rows"].size(1) // HV
    w, kg, qg, aqk = (x[n].float().view(T, HV, -1) for n in ("w_rows", "kg_rows", "qg_rows", "aqk_rows"))
    u, au = (x[n].float().view(T, HV, V) for n in ("u_rows", "au_rows"))
    decay = x["decay_flat"].view(T // C, HV, K)
    state = x["state_rows"].view(HV, V, K).transpose(1, 2).clone()  # [HV, K, V]
    out = torch.zeros(T, HV, V)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    for c in range(T // C):
        s = slice(c * C, (c + 1) * C)
        for h in range(HV):
            sb = bf(state[h])
            v_new = bf(u[s, h] - w[s, h] @ sb)
            state[h] = state[h] * decay[c, h][:, None] + kg[s, h].T @ v_new
            extra = au[s, h] if qprime else aqk[s, h] @ v_new
            out[s, h] = qg[s, h] @ sb + extra
    return out.reshape(T, HV * V), state.transpose(1, 2).reshape(HV * V, K)


def check() -> None:
    from kdakit.kernels.tools import interpret

    interpret.install()  # kdakit's interpreter shim (a bf16 dot is wrong under the bare interpreter)
    for C, qprime in ((64, False), (64, True), (128, True)):  # the timed forms
        x = inputs(T=256, HV=2, K=32, V=32, C=C, device="cpu")
        want_o, want_s = reference(x, 2, C, qprime)
        kernel(stages=1)(**x, QPRIME=qprime, HV=2)
        # relative to the largest value: bf16 roundings of v_new may fall the other way
        err_o = ((x["o_rows"].float() - want_o).abs().max() / want_o.abs().max()).item()
        err_s = ((x["state_rows"] - want_s).abs().max() / want_s.abs().max()).item()
        print(f"C={C} qprime={qprime}: relative output err {err_o:.2e}, state err {err_s:.2e}")
        assert err_o < 1e-2 and err_s < 1e-2, (err_o, err_s)


ARMS = [  # (name, C, qprime, stages)
    ("main-shape: C 64, Aqk, 3 stages", 64, False, 3),
    ("C 64, Q', 3 stages", 64, True, 3),
    ("C 128, Q', 2 stages", 128, True, 2),
    ("C 128, Q', 1 stage", 128, True, 1),
]


def time_arms(path: str) -> None:
    device = torch.device("cuda")
    with open(path, "a") as f:
        for HV in (16, 8):
            for name, C, qprime, stages in ARMS:
                row = {"arm": name, "T": 4096, "HV": HV, "C": C, "qprime": qprime, "stages": stages}
                try:
                    x = inputs(T=4096, HV=HV, K=128, V=128, C=C, device=device)
                    k = kernel(stages)
                    state0 = x["state_rows"].clone()
                    k(**x, QPRIME=qprime, HV=HV)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        for _ in range(10):
                            x["state_rows"].copy_(state0)
                            k(**x, QPRIME=qprime, HV=HV)
                    times = []
                    for _ in range(5):
                        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                        start.record()
                        graph.replay()
                        end.record()
                        end.synchronize()
                        times.append(start.elapsed_time(end) * 100.0)  # µs per call (10 calls a replay)
                    row.update(us=sorted(times)[len(times) // 2], us_all=times,
                               finite=bool(torch.isfinite(x["o_rows"].float()).all()))  # fmt: skip
                except Exception as exc:  # a config that does not fit or compile: recorded, not fatal
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check()
    else:
        time_arms(sys.argv[2])

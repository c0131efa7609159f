"""Target verify per KDA layer as SGLang's CuTe-verify PR timed it (`kernels bench --phases verify-layer`).

One layer's verify is SGLang's conv1d update over the draft tokens (`causal_conv1d_update` with per-step
conv-window scratch, the call `KDAAttnBackend._forward_target_verify` makes) followed by the recurrence, so
both are timed together, on fixed buffers, with `triton.testing.do_bench_cudagraph` (median per round, the
median over `[bench] verify_layer_rounds` rotated rounds). Modes:

- `snapshots`: the recurrence writes every draft step's state into the speculative scratch
  (`intermediate_ssm`), for every arm: SGLang Triton, SGLang Helion, kdakit Helion;
- `ring` (SGLang's Triton only, `--enable-linear-replayssm-spec`): the recurrence writes the draft window's
  raw inputs into the per-slot ReplaySSM rings instead (`cache_ring`), and the commit's exact fold
  (`commit_kda_replayssm_spec`) replays the accepted window into the pool; the row's time is verify + fold,
  with the fold also timed alone. A Helion verify has no ring path in SGLang 0.5.23 (the backend passes
  ring arguments to Triton verify kernels only);
- `cute`: SGLang's fused CuTe DSL kernel (conv1d + recurrence in one launch, both modes) where
  `KDAAttnBackend` runs it (capability 10.x and `cutlass` importable); elsewhere one row says why not.

Every arm is first checked against SGLang's Triton snapshot arm on the same inputs (outputs, snapshots; in
ring mode the pool after the fold against the snapshot of the accepted step). The pure parts (modes, bytes,
the table) run anywhere; timing needs an NVIDIA GPU.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from kdakit.kernels import shapes
from kdakit.kernels.tools import cost_model, timing
from kdakit.kernels.tools.bench_inputs import TOLERANCES, check_errors, rel_err, torch_module, verify_call

PHASE = "verify-layer"
REQUESTS = tuple(shapes.get("bench", "verify_layer_requests"))
ROUNDS = shapes.get("bench", "verify_layer_rounds")
RING_LEN = shapes.get("bench", "replayssm_ring_len")
CONV_WIDTH = 4  # the short conv of GLM-5.3 / Kimi-Linear (conv state keeps width - 1 columns)

# arm key -> (verify arm of the bench, mode, label)
MODES = {
    "triton:snapshots": ("triton", "snapshots", "SGLang Triton, snapshots"),
    "helion-upstream:snapshots": ("helion-upstream", "snapshots", "SGLang Helion, snapshots"),
    "helion-kdakit:snapshots": ("helion-kdakit", "snapshots", "kdakit Helion, snapshots"),
    "triton:ring": ("triton", "ring", "SGLang Triton, ReplaySSM ring (verify + commit fold)"),
    "cute:snapshots": ("cute", "snapshots", "SGLang CuTe DSL fused, snapshots"),
    "cute:ring": ("cute", "ring", "SGLang CuTe DSL fused, ReplaySSM ring (verify + commit fold)"),
}
REFERENCE = "triton:snapshots"
CUTE_NOT_HERE = "not on this GPU (needs SM100 + cutlass)"


def cute_unavailable_reason() -> str | None:
    """Why SGLang's CuTe verify cannot run here (its backend's gate: capability 10.x, cutlass), or None."""
    torch = torch_module()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 10:
        return CUTE_NOT_HERE
    if importlib.util.find_spec("cutlass") is None:
        return CUTE_NOT_HERE
    return None


def layer_bytes(batch: int, tokens: int, h: int, hv: int, k: int, v: int, mode: str) -> int:
    """Bytes one layer's verify must move: the conv update (pre-conv rows and conv state read, the conv
    output and per-step windows written) plus the recurrence (cost_model.verify_bytes); in ring mode the
    ring writes and the fold (state read and written, ring read) replace the snapshots."""
    dim = 2 * h * k + hv * v
    conv = batch * (tokens * dim * 2 * 2 + (CONV_WIDTH - 1) * dim * 2 * (1 + tokens)) + dim * CONV_WIDTH * 4
    recurrence = cost_model.verify_bytes(batch, tokens, h, hv, k, v)
    if mode == "ring":
        state = cost_model.state_bytes(hv, k, v)
        ring_step = hv * v * 2 + h * k * 2 + hv * k * 4 + hv * 4  # raw v, raw k (bf16), gate, beta (fp32)
        recurrence += batch * (-tokens * state + 2 * tokens * ring_step + 2 * state)
    return conv + recurrence


class Layer:
    """One KDA layer's verify buffers at `batch` requests: fixed, as the PR's benchmark kept them."""

    def __init__(self, cfg, batch: int, gen, device: str = "cuda", act_dtype=None):
        torch = torch_module()
        self.cfg, self.batch = cfg, batch
        H, HV, K, V, T = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim, cfg.draft_tokens
        act = act_dtype or torch.bfloat16
        self.dim = dim = 2 * H * K + HV * V
        n = batch * T
        slots = 2 * batch

        def randn(*shape, dtype=act, scale=1.0):
            return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

        self.x = randn(n, dim)  # the pre-conv projection rows of the draft tokens
        self.a = randn(n, HV * K)
        self.b = randn(n, HV)
        self.A_log = torch.log(torch.empty(HV, device=device).uniform_(1.0, 16.0, generator=gen))
        self.dt_bias = randn(HV * K, dtype=torch.float32, scale=0.5)
        self.conv_weight = randn(dim, CONV_WIDTH, dtype=torch.float32, scale=0.5)  # fp32 as CuTe requires
        self.conv_states0 = randn(slots, CONV_WIDTH - 1, dim)
        self.conv_states = self.conv_states0.clone()
        self.conv_windows = torch.zeros(batch, T, CONV_WIDTH - 1, dim, dtype=act, device=device)
        self.pool0 = randn(slots, HV, V, K, dtype=torch.float32, scale=0.05)
        self.pool = self.pool0.clone()
        self.snapshots = torch.zeros(batch, T, HV, V, K, device=device)
        self.cache_indices = torch.arange(batch, 2 * batch, dtype=torch.int32, device=device)
        self.rows = torch.arange(batch, dtype=torch.int32, device=device)
        self.qsl = torch.arange(0, n + 1, T, dtype=torch.int32, device=device)
        self.rawv = torch.zeros(slots, HV, RING_LEN, V, dtype=act, device=device)
        self.rawk = torch.zeros(slots, H, RING_LEN, K, dtype=act, device=device)
        self.ring_g = torch.zeros(slots, HV, RING_LEN, K, device=device)
        self.ring_beta = torch.zeros(slots, HV, RING_LEN, device=device)
        # every draft token accepted: the fold's longest replay (accept lengths count the bonus token)
        self.accept_lens = torch.full((batch,), T, dtype=torch.int32, device=device)

    def reset(self) -> None:
        self.conv_states.copy_(self.conv_states0)
        self.pool.copy_(self.pool0)
        self.snapshots.fill_(float("nan"))

    def conv_update(self, conv1d_update):
        """SGLang's conv1d update over the draft tokens with per-step window scratch, as the backend calls
        it ([batch, dim, T] views of the dense rows), back to [batch * T, dim] rows."""
        T = self.cfg.draft_tokens
        dense = self.x.view(self.batch, T, self.dim)
        out = conv1d_update(
            dense.transpose(1, 2), self.conv_states.transpose(-1, -2), self.conv_weight, None,
            activation="silu", conv_state_indices=self.cache_indices,
            intermediate_conv_window=self.conv_windows.transpose(-1, -2),
            intermediate_state_indices=self.rows,
        )  # fmt: skip
        return out.transpose(1, 2).reshape(self.batch * T, self.dim)

    def ring_kwargs(self) -> dict:
        return dict(
            cache_ring=True, replayssm_rawv=self.rawv, replayssm_rawk=self.rawk, replayssm_g=self.ring_g,
            replayssm_beta=self.ring_beta,
        )  # fmt: skip

    def verify(self, arm: str, fn, conv1d_update, mode: str):
        """conv1d update + the arm's verify (TritonKDAKernel / HelionKDAKernel.target_verify's call)."""
        mixed = self.conv_update(conv1d_update)
        x = {"mixed_qkv": mixed, "a": self.a, "b": self.b}
        snapshots, extra = (self.snapshots, None) if mode == "snapshots" else (None, self.ring_kwargs())
        return verify_call(
            arm, fn, self.cfg, x, self.A_log, self.dt_bias, self.pool, self.cache_indices, self.rows,
            self.qsl, snapshots, extra,
        )  # fmt: skip

    def fold(self, commit):
        """SGLang's ReplaySSM commit for one layer: the accepted window folded into the pool in place."""
        commit(
            checkpoint_state=self.pool, rawv_cache=self.rawv, rawk_cache=self.rawk, gk_cache=self.ring_g,
            beta_cache=self.ring_beta, ssm_state_indices=self.cache_indices, accept_lens=self.accept_lens,
            max_cache_len=RING_LEN, num_k_heads=self.cfg.heads, null_block_id=-1,
        )  # fmt: skip

    def cute(self, run_cute, mode: str):
        """SGLang's fused CuTe DSL verify through the backend's own call (`_run_dspark_cutedsl_mtp`)."""
        cfg = self.cfg
        K = cfg.head_dim
        layer = SimpleNamespace(
            num_q_heads=cfg.heads, num_k_heads=cfg.heads, num_v_heads=cfg.value_heads, head_q_dim=K,
            head_k_dim=K, head_v_dim=K, q_dim=cfg.heads * K, k_dim=cfg.heads * K, v_dim=cfg.value_heads * K,
            conv_weights=self.conv_weight, bias=None, A_log=self.A_log, dt_bias=self.dt_bias,
            lower_bound=cfg.lower_bound,
        )  # fmt: skip
        ring = {k: v for k, v in self.ring_kwargs().items() if k != "cache_ring"} if mode == "ring" else {}
        out = run_cute(
            layer=layer, mixed_qkv=self.x, a=self.a, b=self.b, conv_states=self.conv_states,
            ssm_states=self.pool, intermediate_state_cache=self.snapshots if mode == "snapshots" else None,
            intermediate_conv_window_cache=self.conv_windows, intermediate_state_indices=self.rows,
            cache_indices=self.cache_indices, query_start_loc=self.qsl, **ring,
        )  # fmt: skip
        return out.reshape(-1, cfg.value_heads, K)


def load_cute():
    """SGLang's backend call of the fused CuTe verify (importing SGLang's KDA backend), or raise."""
    from sglang.srt.layers.attention.linear.kda_backend import KDAAttnBackend

    return KDAAttnBackend._run_dspark_cutedsl_mtp


def step(layer: Layer, key: str, arms: dict):
    """The timed call of one arm key (MODES), returning the output rows."""
    arm, mode, _ = MODES[key]
    if arm == "cute":
        out = layer.cute(arms["verify-layer:cute"], mode)
    else:
        out = layer.verify(arm, arms[f"verify:{arm}"], arms["verify-layer:conv1d-update"], mode)
    if mode == "ring":
        layer.fold(arms["verify-layer:replayssm-commit"])
    return out


def bench_bytes_row(cfg, batch: int) -> dict:
    H, HV, K, V, T = cfg.heads, cfg.value_heads, cfg.head_dim, cfg.head_dim, cfg.draft_tokens
    row = dict(phase=PHASE, shape=f"{batch}x{T}", shape_label=f"{batch} × {T}", batch=batch, tokens=T)
    row["bytes"] = layer_bytes(batch, T, H, HV, K, V, "snapshots")
    row["bytes_ring"] = layer_bytes(batch, T, H, HV, K, V, "ring")
    row["arms"] = {}
    return row


def bench_row(
    cfg,
    batch: int,
    arms: dict,
    missing: dict,
    timer,
    gen,
    do_bench=None,
    rounds: int = ROUNDS,
    act_dtype=None,
    progress=None,
) -> dict:
    """One request count: every arm key checked against Triton's snapshots, then timed in `rounds` rotated
    rounds (per round: do_bench_cudagraph's median, µs). `timer` is unused (the PR's method, not the bench's
    L2-cold rotation); `do_bench(fn) -> µs` and `act_dtype` (default bf16) are for the CPU tests.
    progress(message, row), if given, follows each check and each timed round (as bench.run_arms)."""
    torch = torch_module()
    if do_bench is None:
        from triton.testing import do_bench_cudagraph

        def do_bench(fn):
            return do_bench_cudagraph(fn, return_mode="median") * 1000.0

    row = bench_bytes_row(cfg, batch)
    tell = timing.teller(progress, row)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layer = Layer(cfg, batch, gen, device=device, act_dtype=act_dtype)
    T = cfg.draft_tokens
    cute_reason = cute_unavailable_reason() if device == "cuda" else CUTE_NOT_HERE
    if cute_reason is None and "verify-layer:cute" not in arms:
        try:
            arms["verify-layer:cute"] = load_cute()
        except Exception as exc:  # noqa: BLE001 - recorded as the row's reason
            cute_reason = f"SGLang's KDA backend does not import: {type(exc).__name__}: {exc}"[:500]
    reference = None
    needs = {"verify-layer:conv1d-update"}
    for key, (arm, mode, _) in MODES.items():
        if arm == "cute":
            if cute_reason is not None:
                row["arms"][key] = {"status": "missing", "error": cute_reason}
                continue
        else:
            wanted = needs | {f"verify:{arm}"}
            if mode == "ring":
                wanted.add("verify-layer:replayssm-commit")
            absent = sorted(w for w in wanted if w not in arms)
            if absent:
                why = "; ".join(f"{w}: {missing.get(w, 'not available')}" for w in absent)
                row["arms"][key] = {"status": "missing", "error": why[:2000]}
                continue
        try:
            layer.reset()
            out = step(layer, key, arms).float().clone()
            if device == "cuda":
                torch.cuda.synchronize()
            if key == REFERENCE:
                reference = {"out": out, "state": layer.snapshots.clone()}
                check = check_errors({"out": 0.0, "state": 0.0}, TOLERANCES, {"reference": key})
            elif reference is None:
                raise RuntimeError(f"no reference: {REFERENCE} did not run")
            else:
                errors = {"out": rel_err(out, reference["out"])}
                if mode == "snapshots":
                    errors["state"] = rel_err(layer.snapshots, reference["state"])
                else:  # after the fold the pool holds the state of the last accepted step
                    slots = layer.cache_indices.long()
                    errors["state"] = rel_err(layer.pool[slots], reference["state"][:, T - 1])
                check = check_errors(errors, TOLERANCES)
            row["arms"][key] = {"status": "ok", "check": check}
        except Exception as exc:  # noqa: BLE001 - an arm that raises is recorded, the others still run
            row["arms"][key] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]}
        tell(f"{key} {row['arms'][key]['status']}")
    layer.reset()
    checked = [k for k, e in row["arms"].items() if e["status"] == "ok"]

    def time_key(key):
        return {"samples_us": [do_bench(lambda: step(layer, key, arms))]}

    timed, errors = timing.time_rounds(checked, time_key, rounds, timing.rounds_so_far(row, rounds, tell))
    for key in checked:
        row["arms"][key].pop("timed_rounds_us", None)  # the summary's rounds hold them
        if key in errors:
            exc = errors[key]
            row["arms"][key] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]}
        else:
            row["arms"][key].update(timing.arm_timing(timed[key]))
    if "triton:ring" in checked and "triton:ring" not in errors:
        fold = [do_bench(lambda: layer.fold(arms["verify-layer:replayssm-commit"])) for _ in range(rounds)]
        row["arms"]["triton:ring"]["commit_fold"] = timing.summarize(fold)
    return row

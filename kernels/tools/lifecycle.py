"""A request lifecycle through SGLang 0.5.23's own KDA attention backend, for one arm.

This drives `KDAAttnBackend` (srt/layers/attention/linear/kda_backend.py) as a server does: the backend,
its kernel dispatcher and adapters are built by SGLang's code from the real `--linear-attn-*-backend`
values, on SGLang's own state pool (`HybridReqToTokenPool` with its speculative state and radix-cache
track slots), `ForwardBatch`, `EagleVerifyInput` and forward metadata, and every kernel call is the one
SGLang's backend makes. The lifecycle:

1. extend (prefill) of requests of mixed lengths with radix-cache state tracking on;
2. decode steps;
3. EAGLE target verify of 6 draft tokens, chain (top-k 1) or tree (top-k > 1), then the accepted prefix
   of each request committed by SGLang's post-verify path (`update_mamba_state_after_mtp_verify`);
4. a second verify round on the committed state with other slots;
5. decode and verify captured in CUDA graphs at the server's bucket size and replayed with padded rows
   (GPU only; the backend's capture/replay metadata methods, as SGLang's graph runner calls them).

Stand-ins, each only where SGLang cannot be built without a GPU server and a model:
- `_Runner`: a `ModelRunner` subclass that skips `ModelRunner.__init__` (which loads a model and starts
  distributed groups) and carries the attributes the backend reads; its `linear_attn_backends` comes from
  SGLang's own `resolve_linear_attn_backends`.
- `_NoFullAttention`: the full-attention half of `HybridLinearAttnBackend` (this model slice has no full
  attention layer; the wrapper only routes KDA calls and commits state).
- Requests get pool rows and mamba slots from the pool's own allocator, not from scheduler `Req` objects.
- On the CPU only: `is_cuda()` in the backend module answers True (SGLang's dispatcher refuses Helion
  without CUDA, while Triton's interpreter, TRITON_INTERPRET=1, runs the same kernels on CPU tensors); the
  post-verify commit's CUDA-only fused scatters give way to SGLang's own torch scatter; two interpreter gaps
  are closed (`interpret.sglang_builtin_aliases`); activations are fp32 (the interpreter's bf16 arithmetic).

The model's projections in front of the layer are replaced by random pre-conv rows, gates and betas of the
layer's shapes; the fp64 reference (`kdakit.kernels.reference`) recomputes each request from those rows,
short conv included, and carries its committed state from phase to phase, so every phase's outputs, pool
state and snapshots are checked (`problems`, `TOLERANCES`). Results: `LifecycleReport`.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

from kdakit.kernels import shapes
from kdakit.kernels.tools import interpret

DRAFT_TOKENS = shapes.get("model", "draft_tokens")  # the PR's --speculative-num-draft-tokens
GATE_LOWER_BOUND = shapes.get("model", "lower_bound")
CONV_KERNEL = 4  # GLM-5.3-Flash's short conv (linear_conv_kernel_dim)


@dataclass(frozen=True)
class Shape:
    """One KDA layer's shape and pool: heads per rank (H == HV), head dim, state dtype."""

    heads: int
    head_dim: int
    state_dtype: str = "float32"  # "bfloat16" as with --mamba-ssm-dtype bfloat16
    prefill_lens: tuple[int, ...] = (1, 9, 70, 128)
    decode_steps: int = 2
    graph_bs: int = 0  # CUDA graph bucket (0: no graphs); padded rows = graph_bs - requests
    # token buckets of the breakable prefill CUDA graph (--cuda-graph-backend-prefill breakable); empty: off
    prefill_buckets: tuple[int, ...] = ()
    prefill_graph_max_seqs: int = 4  # SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS: larger batches run eagerly
    layers: int = 1  # KDA layers (a stack shares one pool, one slot per request across its layers)

    @property
    def label(self) -> str:
        return f"h{self.heads}-d{self.head_dim}-{self.state_dtype}"


@dataclass
class PhaseError:
    phase: str
    arm: str
    out: float
    state: float


@dataclass
class LifecycleReport:
    arm: str
    shape: Shape
    topk: int
    phases: list[str] = field(default_factory=list)
    errors: list[PhaseError] = field(default_factory=list)  # vs the fp64 reference
    dispatcher: str = ""
    outputs: dict = field(default_factory=dict)  # phase -> the layer's output [tokens, H, D] (CPU)
    routes: dict = field(default_factory=dict)  # prefill graph phase -> how SGLang ran the KDA extend
    states: dict = field(default_factory=dict)  # phase -> the batch's committed pool states (CPU)

    def max_errors(self) -> tuple[float, float]:
        return max((e.out for e in self.errors), default=0.0), max(
            (e.state for e in self.errors), default=0.0
        )


@contextlib.contextmanager
def _cpu_state_scatter():
    """The post-verify commit's fused SSM and conv-window scatters refuse CPU tensors; SGLang's own torch
    path for the same scatter (`HybridLinearAttnBackend._scatter_speculative_state_with_mask`:
    dst[:, slot] = src[:, row, step], strided views included) runs in their place."""
    from sglang.kernels.ops.mamba import mamba_state_scatter_triton as scatter
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend

    torch_scatter = HybridLinearAttnBackend._scatter_speculative_state_with_mask
    replaced = {
        "fused_mamba_state_scatter_with_mask": torch_scatter,
        "fused_conv_window_scatter_with_mask": torch_scatter,
        "_conv_multi_eligible": lambda pairs: False,
    }
    originals = {name: getattr(scatter, name) for name in replaced}
    for name, fn in replaced.items():
        setattr(scatter, name, fn)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(scatter, name, fn)


@contextlib.contextmanager
def _cpu_pinned_copies():
    """The prefill graph tables are staged through pinned host memory (`fill`), which needs a CUDA driver;
    on the CPU the staging tensor stays pageable, the copy itself is the same."""
    import torch

    original = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.pin_memory = original


@contextlib.contextmanager
def _strong_refs_without_sgl_kernel():
    """An eager break captured in a breakable graph keeps weak references to its inputs through
    `sgl_kernel`'s weak_ref_tensors (SGLang's GPU ops); where that package is a stand-in (a GPU host
    without SGLang's kernels wheel), the capture keeps strong references instead: the same replay, the
    inputs only live as long as the graph."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import breakable_cuda_graph

    try:
        from sglang.srt.model_executor.runner_backend_utils.weak_ref_tensor import weak_ref_tensors

        weak_ref_tensors(__import__("torch").zeros(1, device="cuda"))
        available = True
    except (ImportError, RuntimeError):
        available = False
    if available:
        yield
        return
    original = breakable_cuda_graph._weak_ref_if_tensor
    breakable_cuda_graph._weak_ref_if_tensor = lambda x: x
    try:
        yield
    finally:
        breakable_cuda_graph._weak_ref_if_tensor = original


@contextlib.contextmanager
def _environ(**values: str):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _cuda_answer(backend_module, value: bool):
    original = backend_module.is_cuda
    backend_module.is_cuda = lambda: value
    try:
        yield
    finally:
        backend_module.is_cuda = original


def arm_settings(arm: str) -> tuple[str, str]:
    """(the value of all three --linear-attn-{prefill,decode,verify}-backend flags, KDAKIT_HELION_KERNELS)."""
    from kdakit.kernels.integration import DEFAULT, ENV_VAR

    from kdakit.facts import profiles

    arms = profiles.arms()
    if arm not in arms:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(arms)}")
    spec = arms[arm]
    return spec["kda_backend"], spec.get("env", {}).get(ENV_VAR, DEFAULT)


def load_patched_sglang(kernels: str):
    """SGLang's files that kdakit's patch changes, patched, with the Helion adapter resolving its kernels from
    `kernels` (kdakit|upstream); returns the adapter module.

    In the image the installed files are already patched and the adapter is re-imported (it picks its
    kernels once, at import); a development venv has SGLang's wheel unpatched, so each patched source is
    built in memory (the same strict applier as the image build) and registered under its module name, where
    SGLang's code imports it. Files that need no re-import (the KDA backend) are patched once per process.
    The patch lists the graph's extend before the KDA backend, which imports a function from it at its own
    import: built in that order, the backend holds the patched function.
    """
    import importlib
    import importlib.util
    import sys

    from kdakit.kernels import integration
    from kdakit.kernels.integration import unified_diff

    os.environ[integration.ENV_VAR] = kernels
    patches = {fp.path: fp for fp in unified_diff.parse(integration.patch_file().read_text())}
    adapter = None
    for path, file_patch in patches.items():
        name = integration.module_name(path)
        loaded = sys.modules.get(name)
        if path != integration.ADAPTER and getattr(loaded, "__kdakit_patched__", False):
            continue
        sys.modules.pop(name, None)
        spec = importlib.util.find_spec(name)
        with open(spec.origin) as f:
            source = f.read().splitlines()
        if unified_diff.apply_hunks(source, file_patch.hunks, reverse=True) is None:  # not patched yet
            source = unified_diff.apply_hunks(source, file_patch.hunks)
            if source is None:
                raise integration.PatchError(f"kdakit's patch does not apply to {spec.origin}")
        module = importlib.util.module_from_spec(spec)
        module.__kdakit_patched__ = True
        sys.modules[name] = module
        exec(compile("\n".join(source) + "\n", spec.origin, "exec"), module.__dict__)
        parent, _, leaf = name.rpartition(".")
        setattr(importlib.import_module(parent), leaf, module)
        if path == integration.ADAPTER:
            adapter = module
    return adapter


# ---------------------------------------------------------------------------------------------------------
# SGLang's objects


def _server_args(backend: str, topk: int, graphs: bool, prefill_graph: bool = False) -> dict:
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig

    return dict(
        linear_attn_backend="triton",
        linear_attn_decode_backend=backend,
        linear_attn_prefill_backend=backend,
        linear_attn_verify_backend=backend,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_num_steps=DRAFT_TOKENS - 1,
        chunked_prefill_size=-1,
        # the radix cache's extra state buffer, as the pool below has it (prefill graphs size track tables)
        disable_radix_cache=False,
        mamba_radix_cache_strategy="extra_buffer",
        cuda_graph_config=CudaGraphConfig(
            decode=PhaseConfig(backend=Backend.FULL if graphs else Backend.DISABLED),
            prefill=PhaseConfig(backend=Backend.BREAKABLE if prefill_graph else Backend.DISABLED),
        ),
        # the lazy property cache production derives from the model's config and page size
        _mamba_cache_chunk_size=64,
    )


def _runner_class():
    from sglang.srt.model_executor.model_runner import ModelRunner

    class _Runner(ModelRunner):
        """ModelRunner without its __init__ (model loading, distributed groups): what the backend reads."""

        def __init__(self, *, device, server_args, pool):
            self.device = device
            self.server_args = server_args
            self.req_to_token_pool = pool
            self.token_to_kv_pool = None
            self.is_draft_worker = False
            self.model_config = SimpleNamespace(hf_text_config=SimpleNamespace(mamba_chunk_size=64))

    return _Runner


class _NoFullAttention:
    """The full-attention half of HybridLinearAttnBackend: this slice of the model has no full-attention
    layer, and the wrapper only routes the KDA layer's calls and commits state after verify."""

    token_to_kv_pool = req_to_token_pool = kv_index_translator = None
    needs_cpu_seq_lens = False
    use_captured_forward_metadata_for_breakable_cuda_graph = False

    def init_forward_metadata(self, forward_batch):
        pass

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        pass

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        pass


@dataclass
class _PrefillGraph:
    """One captured token bucket of the breakable prefill CUDA graph."""

    bucket: int
    batch: object  # the capture's ForwardBatch
    static: tuple  # static input buffers: pre-conv rows, gate, beta
    metadata: object = None  # the KDA extend's static tables (None: the extend is an eager break)
    graph: object = None  # SGLang's BreakableCUDAGraph (None on the CPU)
    out: object = None  # the captured output

    def run(self, body):
        """One call of the layer body on the static buffers. A method, not a closure stored on the entry:
        a closure over the entry would make a reference cycle, so a dropped graph would wait for the cycle
        collector, which could then destroy it in the middle of a later capture and invalidate that one."""
        mixed, gate, beta = self.static
        return body(self.batch, mixed, gate.unsqueeze(0), beta.unsqueeze(0))


@dataclass
class _Request:
    row: int  # req_to_token_pool row
    slot: int  # mamba slot
    track_slots: list[int]
    mixed: list  # committed pre-conv token rows [dim] (bf16)
    gate: list  # committed raw gate rows [HV*K]
    beta: list  # committed raw beta rows [HV]
    ref_state: object = None  # fp64 reference state after the committed tokens (None: zeros)


class Lifecycle:
    """SGLang's KDA backend for one arm, one layer, a handful of requests; see the module docstring."""

    def __init__(self, arm: str, shape: Shape, *, topk: int = 1, device: str | None = None, seed: int = 0):
        import torch

        self.arm, self.shape, self.topk = arm, shape, topk
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        # Triton's interpreter does elementwise bf16 arithmetic on the raw bit patterns (NaN), so on the
        # CPU the activations and conv states are fp32; a GPU runs the model's bf16
        self.act_dtype = torch.bfloat16 if self.device != "cpu" else torch.float32
        self.report = LifecycleReport(arm, shape, topk)
        self.gen = torch.Generator().manual_seed(seed)
        self._stack = contextlib.ExitStack()
        try:
            self._build()
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- construction ----------------------------------------------------------------------------------

    def _build(self) -> None:
        import torch
        from sglang.srt.configs.mamba_utils import (
            KimiLinearCacheParams,
            KimiLinearStateShape,
            Mamba2StateDType,
        )
        from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend
        from sglang.srt.layers.attention.linear.utils import resolve_linear_attn_backends
        from sglang.srt.layers.radix_linear_attention import RadixLinearAttention
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
        from sglang.srt.runtime_context import get_context, get_parallel

        backend, kernels = arm_settings(self.arm)
        load_patched_sglang(kernels)  # every arm: the image's SGLang is patched whatever the arm
        from sglang.srt.layers.attention.linear import kda_backend  # the patched module

        s = self.shape
        H, D = s.heads, s.head_dim
        self.H, self.D = H, D
        self.dim = 3 * H * D
        override = get_context().override_server_args(
            **_server_args(backend, self.topk, s.graph_bs > 0, bool(s.prefill_buckets))
        )
        server_args = override.install()
        self._stack.callback(override.restore)
        self._stack.enter_context(_environ(SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS=str(s.prefill_graph_max_seqs)))
        self._stack.enter_context(get_parallel().override(attn_tp_size=1))
        if self.device == "cpu":
            self._stack.enter_context(_cuda_answer(kda_backend, True))
            self._stack.enter_context(interpret.sglang_builtin_aliases())
            self._stack.enter_context(_cpu_state_scatter())
            self._stack.enter_context(_cpu_pinned_copies())
        state_dtype = getattr(torch, s.state_dtype)
        self.max_reqs = max(16, s.graph_bs + 2, len(s.prefill_lens))
        cache = KimiLinearCacheParams(
            shape=KimiLinearStateShape.create(
                tp_world_size=1, num_heads=H, head_dim=D, num_k_heads=H, head_k_dim=D,
                conv_kernel_size=CONV_KERNEL,
            ),
            layers=list(range(s.layers)),
            dtype=Mamba2StateDType(conv=self.act_dtype, temporal=state_dtype),
        )  # fmt: skip
        self.pool = HybridReqToTokenPool(
            size=self.max_reqs, mamba_size=4 * self.max_reqs, mamba_spec_state_size=self.max_reqs,
            max_context_len=512, device=self.device, enable_memory_saver=False, cache_params=cache,
            mamba_layer_ids=list(range(s.layers)), enable_mamba_extra_buffer=True,
            speculative_num_draft_tokens=DRAFT_TOKENS, speculative_eagle_topk=self.topk,
            enable_overlap_schedule=False,
        )  # fmt: skip
        runner = _runner_class()(device=self.device, server_args=server_args, pool=self.pool)
        runner.linear_attn_backends = resolve_linear_attn_backends()
        self.kda = kda_backend.KDAAttnBackend(runner)
        self.backend = HybridLinearAttnBackend(_NoFullAttention(), self.kda, full_attn_layers=[])
        d = self.kda.kernel_dispatcher
        self.report.dispatcher = (
            f"decode={type(d.decode_kernel).__name__} verify={type(d.verify_kernel).__name__} "
            f"extend={type(d.extend_kernel).__name__} packed_decode={d.supports_packed_decode}"
        )
        dev = self.device
        conv = (torch.randn(self.dim, CONV_KERNEL, generator=self.gen) * 0.5).to(self.act_dtype)
        self.A_log = (torch.randn(H, generator=self.gen) * 0.5).float()
        self.dt_bias = (torch.randn(H * D, generator=self.gen) * 0.3).float()
        self.layers = [
            RadixLinearAttention(
                layer_id=i, num_q_heads=H, num_k_heads=H, num_v_heads=H, head_q_dim=D, head_k_dim=D,
                head_v_dim=D, conv_weights=conv.to(dev), bias=None, activation="silu",
                A_log=self.A_log.to(dev), dt_bias=self.dt_bias.to(dev), lower_bound=GATE_LOWER_BOUND,
            )
            for i in range(s.layers)
        ]  # fmt: skip
        self.layer = self.layers[0]
        # What a prefill graph captures and a timed prefill runs: (batch, pre-conv rows, gate, beta) -> out;
        # one KDA layer unless a measurement puts a model stand-in around the layers (kernels/tools/served.py)
        self.body = lambda batch, mixed, a, b: self.layer(batch, mixed_qkv=mixed, a=a, b=b)
        self.conv_w = conv
        self.requests: list[_Request] = []
        self._graphs: dict = {}
        self._prefill_graphs: dict = {}  # token bucket -> _PrefillGraph

    # -- requests and batches --------------------------------------------------------------------------

    def _fill_pool_with_garbage(self) -> None:
        """Unallocated slots hold noise, so a kernel that reads or keeps a wrong slot shows in the errors."""
        import torch

        cache = self.pool.mamba_pool.mamba_cache
        for t in (cache.temporal, *cache.conv):
            t.copy_(torch.randn(t.shape, generator=self.gen).to(t.dtype))

    def new_request(self) -> _Request:
        import torch

        if not self.requests:
            self._fill_pool_with_garbage()
        (row,) = self.pool.alloc_rows(1)
        slot = int(self.pool.mamba_allocator.alloc(1)[0])
        n_track = self.pool.mamba_initial_tracking_slots
        track = self.pool.mamba_allocator.alloc(n_track)
        buf = torch.full((self.pool.mamba_ping_pong_track_buffer_size,), -1, dtype=track.dtype)
        buf[:n_track] = track.cpu()
        self.pool.req_index_to_mamba_index_mapping[row] = slot
        self.pool.req_index_to_mamba_ping_pong_track_buffer_mapping[row] = buf.to(self.device)
        cache = self.pool.mamba_pool.mamba_cache
        for t in (cache.temporal, *cache.conv):  # what the scheduler's mamba_needs_clear does
            t[:, slot].zero_()
        request = _Request(row, slot, [int(x) for x in track.tolist()], [], [], [])
        self.requests.append(request)
        return request

    def _tokens(self, n: int):
        import torch

        H, D = self.H, self.D
        mixed = torch.randn(n, self.dim, generator=self.gen).to(self.act_dtype)
        gate = torch.randn(n, H * D, generator=self.gen).to(self.act_dtype)
        beta = torch.randn(n, H, generator=self.gen).to(self.act_dtype)
        return mixed, gate, beta

    def _forward(self, batch, mixed, gate, beta):
        import torch
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        dev = self.device
        decode = batch.forward_mode.is_decode()
        a = gate.to(dev) if decode else gate.to(dev).unsqueeze(0)  # as Glm5NextLinearAttention passes them
        with torch.no_grad(), forward_context(ForwardContext(attn_backend=self.backend)):
            self.backend.init_forward_metadata(batch)
            out = self.layer(batch, mixed_qkv=mixed.to(dev), a=a, b=beta.to(dev).unsqueeze(0))
        return out.reshape(-1, self.H, self.D).float().cpu()

    def _base_batch(self, mode, reqs, seq_lens, num_tokens, positions):
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        dev = self.device
        return ForwardBatch(
            forward_mode=mode,
            batch_size=len(reqs),
            input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=dev),
            req_pool_indices=torch.tensor([r.row for r in reqs], dtype=torch.int64, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
            out_cache_loc=torch.zeros(num_tokens, dtype=torch.int64, device=dev),
            seq_lens_sum=sum(seq_lens),
            positions=torch.tensor(positions, dtype=torch.int64, device=dev),
        )

    # -- phases ----------------------------------------------------------------------------------------

    def extend(
        self, reqs: list[_Request], lens: list[int], phase: str = "extend", *, graph: bool = False
    ) -> None:
        """Prefill `lens[i]` new tokens of each request, radix-cache tracking as the scheduler asks for it;
        with graph, through SGLang's breakable prefill CUDA graph protocol (`_prefill_graph_forward`)."""
        import torch

        dev = self.device
        prefix = [len(r.mixed) for r in reqs]
        seq_lens = [p + n for p, n in zip(prefix, lens, strict=True)]
        batch = self._extend_batch(reqs, lens, prefix)
        # ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend: track when the extend covers a whole
        # 64-token checkpoint; the tracked length is the request's end (aligned: final state; else: the
        # last chunk boundary, from the kernel's track snapshot)
        grid = 64
        mask = [n >= grid for n in lens]
        track_len = [s if m else -1 for s, m in zip(seq_lens, mask, strict=True)]
        batch.mamba_prefill_track_mask_cpu = mask
        batch.mamba_track_seqlens_cpu = track_len
        batch.mamba_track_mask = torch.tensor(mask, dtype=torch.bool, device=dev)
        batch.mamba_track_seqlens = torch.tensor(track_len, dtype=torch.int64, device=dev)
        batch.mamba_track_indices = torch.tensor(
            [r.track_slots[0] for r in reqs], dtype=torch.int64, device=dev
        )
        mixed, gate, beta = self._tokens(sum(lens))
        before = self._temporal()
        if graph:
            out = self._prefill_graph_forward(phase, batch, mixed, gate, beta)
        else:
            out = self._forward(batch, mixed, gate, beta)
        written = {r.slot for r in reqs}
        written |= {r.track_slots[0] for r, m in zip(reqs, mask, strict=True) if m}
        self._check_untouched(before, self._temporal(), written, phase)
        at = 0
        expected, tracked_states = [], []
        for r, n, m in zip(reqs, lens, mask, strict=True):
            rows = (mixed[at : at + n], gate[at : at + n], beta[at : at + n])
            o, states = self._continue(r, *rows)
            if m:  # the track snapshot: the state after the last whole chunk (aligned: the final state)
                tracked_states.append((r, states[(n // grid) * grid - 1 if n % grid else n - 1]))
            self._commit(r, rows, states[-1])
            expected.append(o)
            at += n
        self._record(phase, out, torch.cat(expected), reqs)
        errs = []
        temporal = self._temporal()
        for r, want in tracked_states:
            errs.append((temporal[r.track_slots[0]].double() - want).abs().max().item())
        self.report.errors.append(PhaseError(f"{phase} track", self.arm, 0.0, max(errs, default=0.0)))

    def _prefill_context(self, batch):
        """What the prefill graph runner holds around a capture and a replay: the batch, the prefill graph
        scope (breakable, not full), the attention backend and the breakable-graph runtime flag."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
        from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
            enable_breakable_cuda_graph,
        )
        from sglang.srt.model_executor.runner_utils.forward_batch import set_forward_batch
        from sglang.srt.model_executor.runner_utils.prefill_graph import prefill_graph_scope

        stack = contextlib.ExitStack()
        stack.enter_context(set_forward_batch(batch))
        stack.enter_context(prefill_graph_scope(full_graph=False))
        stack.enter_context(forward_context(ForwardContext(attn_backend=self.backend), forward_batch=batch))
        stack.enter_context(enable_breakable_cuda_graph())
        return stack

    def _capture_prefill_graph(self, bucket: int) -> _PrefillGraph:
        """The prefill graph runner's capture of one token bucket (`capture_prepare`, `capture_one_shape`):
        one synthetic request of `bucket` tokens on request-pool row 0 (the pool's padding slot), the
        backend's capture metadata (the KDA extend's static tables when SGLang captures it), two warm-ups
        clearing the capture slot after each, then SGLang's BreakableCUDAGraphCapture of the layer over static
        inputs. On the CPU nothing is captured: a replay runs the same forward on the same static buffers."""
        import torch
        from sglang.srt.model_executor.runner.base_cuda_graph_runner import freeze_gc
        from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
            BreakableCUDAGraph,
            BreakableCUDAGraphCapture,
        )

        dev = self.device
        fb = self._extend_batch([_Request(0, 0, [], [], [], [])], [bucket], [0])
        fb.global_num_token_non_padded_cpu = bucket
        static = (
            torch.zeros(bucket, self.dim, dtype=self.act_dtype, device=dev),
            torch.zeros(bucket, self.H * self.D, dtype=self.act_dtype, device=dev),
            torch.zeros(bucket, self.H, dtype=self.act_dtype, device=dev),
        )
        entry = _PrefillGraph(bucket, fb, static)
        cache = self.pool.mamba_pool.mamba_cache
        with torch.no_grad(), self._prefill_context(fb):
            if self.backend.use_captured_forward_metadata_for_breakable_cuda_graph:
                entry.metadata = self.backend.init_forward_metadata_for_breakable_cuda_graph_capture(fb)
            else:
                self.backend.init_forward_metadata(fb)
            if dev != "cpu":
                for _ in range(2):  # the runner's warm-ups, the capture slot cleared after each
                    torch.cuda.synchronize()
                    entry.run(self.body)
                    for t in (cache.temporal, *cache.conv):
                        t[:, 0].zero_()
                entry.graph = BreakableCUDAGraph()
                self._stack.enter_context(_strong_refs_without_sgl_kernel())
                stream = torch.cuda.Stream()  # captures run on a side stream, as the runner's do
                stream.wait_stream(torch.cuda.current_stream())
                # the runner's garbage-collector guard (the server's default, --enable-cudagraph-gc off):
                # collect first, frozen while capturing, so no earlier graph is destroyed mid-capture
                with (
                    freeze_gc(enable_cudagraph_gc=False),
                    BreakableCUDAGraphCapture(
                        cuda_graph=entry.graph, pool=torch.cuda.graph_pool_handle(), stream=stream
                    ),
                ):
                    entry.out = entry.run(self.body)
                torch.cuda.current_stream().wait_stream(stream)
        self._prefill_graphs[bucket] = entry
        return entry

    def _prefill_graph_forward(self, phase: str, batch, mixed, gate, beta):
        """The prefill graph runner's replay of `batch`: the smallest captured token bucket that holds it;
        a batch of more sequences than the KDA tables hold runs eagerly (the runner's replay vote on
        `prefill_cuda_graph_max_batch_size`); else the backend's replay metadata (`fill` of the static
        tables, or the eager metadata where the KDA extend is an eager break), the inputs copied into the
        static buffers, the graph replayed. The route taken is recorded in report.routes[phase]."""
        import torch

        n = batch.extend_num_tokens
        bucket = min((b for b in self.shape.prefill_buckets if b >= n), default=None)
        if bucket is None:
            raise ValueError(f"{n} tokens fit no prefill graph bucket {self.shape.prefill_buckets}")
        captured_tables = self.backend.use_captured_forward_metadata_for_breakable_cuda_graph
        if captured_tables and batch.batch_size > self.backend.prefill_cuda_graph_max_batch_size:
            self.report.routes[phase] = "eager (more sequences than the graph's tables)"
            return self._forward(batch, mixed, gate, beta)
        entry = self._prefill_graphs.get(bucket) or self._capture_prefill_graph(bucket)
        for buf, value in zip(entry.static, (mixed, gate, beta), strict=True):
            buf[n:].fill_(0.5)  # a server's static rows past the batch hold an earlier batch's values
            buf[:n].copy_(value.to(self.device))
        batch.global_num_token_non_padded_cpu = n
        with torch.no_grad(), self._prefill_context(batch):
            self.backend.prepare_forward_metadata_for_breakable_cuda_graph_replay(entry.metadata, batch)
            in_graph = self.backend.linear_extend_in_graph()
            self.report.routes[phase] = "in graph" if in_graph else "eager break"
            if entry.graph is not None:
                entry.graph.replay()
                out = entry.out
            else:
                # the CPU's stand-in for a replay: the captured call (the bucket's tokens, this batch's
                # metadata) on the static buffers; an eager break reads the batch the runner holds
                entry.batch = copy.copy(batch)
                entry.batch.global_num_token_non_padded_cpu = bucket
                out = entry.run(self.body)
        out = out.reshape(bucket, self.H, self.D)
        if n < bucket and not bool((out[n:] == 0).all()):
            raise AssertionError(f"{self.arm} {phase}: the bucket's padded rows of the output are not zero")
        return out[:n].float().cpu()

    def decode(self, reqs: list[_Request], *, graph: bool = False) -> None:
        """One decode token per request; with graph, replayed from a CUDA graph of the bucket's size."""
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        seq_lens = [len(r.mixed) + 1 for r in reqs]
        mixed, gate, beta = self._tokens(len(reqs))
        before = self._temporal()
        if graph:
            out = self._graph_forward(ForwardMode.DECODE, reqs, seq_lens, mixed, gate, beta)
        else:
            batch = self._base_batch(ForwardMode.DECODE, reqs, seq_lens, len(reqs), [s - 1 for s in seq_lens])
            out = self._forward(batch, mixed, gate, beta)
        expected = []
        for i, r in enumerate(reqs):
            rows = (mixed[i : i + 1], gate[i : i + 1], beta[i : i + 1])
            o, states = self._continue(r, *rows)
            self._commit(r, rows, states[-1])
            expected.append(o)
        self._record("decode graph" if graph else "decode", out, torch.cat(expected), reqs, before)

    def _extend_batch(self, reqs: list[_Request], lens: list[int], prefix: list[int]):
        """SGLang's ForwardBatch of an extend: `lens[i]` new tokens after `prefix[i]` committed ones."""
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        dev = self.device
        seq_lens = [p + n for p, n in zip(prefix, lens, strict=True)]
        positions = [p + i for p, n in zip(prefix, lens, strict=True) for i in range(n)]
        batch = self._base_batch(ForwardMode.EXTEND, reqs, seq_lens, sum(lens), positions)
        ext = torch.tensor(lens, dtype=torch.int32, device=dev)
        batch.extend_prefix_lens = torch.tensor(prefix, dtype=torch.int32, device=dev)
        batch.extend_prefix_lens_cpu = list(prefix)
        batch.extend_seq_lens, batch.extend_seq_lens_cpu = ext, list(lens)
        batch.extend_start_loc = torch.cumsum(ext, 0) - ext
        batch.extend_num_tokens = sum(lens)
        return batch

    def _fresh_batch(self, lens: list[int]):
        """An extend of fresh requests (no prefix, no tracking) of `lens` tokens, and its inputs."""

        dev = self.device
        while len(self.requests) < len(lens):
            self.new_request()
        reqs = self.requests[: len(lens)]  # every call starts them afresh (no prefix)
        n = sum(lens)
        batch = self._extend_batch(reqs, lens, [0] * len(lens))
        batch.global_num_token_non_padded_cpu = n
        mixed, gate, beta = (t.to(dev) for t in self._tokens(n))
        return batch, mixed, gate, beta

    def time_prefill(
        self,
        lens: list[int],
        *,
        mode: str,
        reps: int = 20,
        metadata_each: bool = False,
        profile_calls: int = 0,
    ) -> dict:
        """Microseconds per prefill of fresh requests of `lens` through `self.body`, as a server runs it (GPU
        only): mode "graph" SGLang's breakable prefill CUDA graph (captured for a bucket of exactly these
        tokens; the KDA extend in the graph or an eager break, as SGLang decides for the arm), "eager" no
        graph (prefill graphs off, or more sequences than the tables hold). The span runs from an event
        before the first prefill to one after the last, so host time the GPU waits for counts; with
        metadata_each every prefill prepares its metadata (the graph's `fill`, or the eager metadata) as a
        forward does, else once before (per-layer figures). Returns {"us", "route"}, and for eager
        "host_us": the host's time per call while the GPU is kept busy (launch cost alone); with
        profile_calls, "kernels" (µs per call of each GPU kernel over that many more calls, torch profiler)
        and "kernels_us", their sum."""
        import torch

        batch, mixed, gate, beta = self._fresh_batch(lens)
        n = batch.extend_num_tokens
        result = {}
        with torch.no_grad():
            if mode == "graph":
                entry = self._prefill_graphs.get(n) or self._capture_prefill_graph(n)
                for buf, value in zip(entry.static, (mixed, gate, beta), strict=True):
                    buf.copy_(value)
                context = self._prefill_context(batch)

                def prepare():
                    self.backend.prepare_forward_metadata_for_breakable_cuda_graph_replay(
                        entry.metadata, batch
                    )

                run = entry.graph.replay
            elif mode == "eager":
                from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

                context = forward_context(ForwardContext(attn_backend=self.backend))
                a, b = gate.unsqueeze(0), beta.unsqueeze(0)

                def prepare():
                    self.backend.init_forward_metadata(batch)

                def run():
                    return self.body(batch, mixed, a, b)
            else:
                raise ValueError(f"mode must be graph or eager; got {mode!r}")
            with context:
                prepare()
                in_graph = mode == "graph" and self.backend.linear_extend_in_graph()
                result["route"] = "in graph" if in_graph else ("eager break" if mode == "graph" else "eager")
                for _ in range(3):
                    run()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(reps):
                    if metadata_each:
                        prepare()
                    run()
                end.record()
                torch.cuda.synchronize()
                result["us"] = round(start.elapsed_time(end) * 1e3 / reps, 2)
                if mode == "eager":
                    result["host_us"] = round(_host_time(run, reps), 2)
                if profile_calls:
                    from kdakit.kernels.tools.profile import kernel_times

                    times = sorted(kernel_times(run, profile_calls).items(), key=lambda kv: -kv[1])
                    result["kernels"] = {name: round(us, 2) for name, us in times}
                    result["kernels_us"] = round(sum(us for _, us in times), 2)
        return result

    def _spec_info(self, input_ids, positions, seq_lens_cpu, bs: int, real_bs: int | None = None):
        import torch
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleVerifyInput

        dev, n = self.device, DRAFT_TOKENS
        parents = self.parents
        first_child = [next((c for c in range(n) if parents[c] == j), -1) for j in range(n)]
        sibling = [next((c for c in range(j + 1, n) if parents[c] == parents[j]), -1) for j in range(n)]
        rows = bs if real_bs is None else real_bs  # a padded graph batch carries tree links for its real rows
        return EagleVerifyInput(
            draft_token=input_ids,
            custom_mask=None,
            positions=positions,
            retrieve_index=torch.arange(n, dtype=torch.int64, device=dev).repeat(rows, 1),
            retrieve_next_token=torch.tensor([first_child] * rows, dtype=torch.int64, device=dev),
            retrieve_next_sibling=torch.tensor([sibling] * rows, dtype=torch.int64, device=dev),
            retrieve_cum_len=torch.arange(rows + 1, dtype=torch.int32, device=dev) * n,
            spec_steps=n - 1,
            topk=self.topk,
            draft_token_num=n,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=int(seq_lens_cpu.sum()),
            seq_lens_cpu=seq_lens_cpu,
        )

    @property
    def parents(self) -> list[int]:
        return TREE_PARENTS if self.topk > 1 else list(range(-1, DRAFT_TOKENS - 1))

    def verify(self, reqs: list[_Request], accept: list[int], phase: str = "verify", *, graph: bool = False):
        """EAGLE target verify of DRAFT_TOKENS tokens per request, then SGLang's commit: chain (top-k 1)
        accepts the first accept[i] tokens; tree (top-k > 1) the path to node accept[i] - 1 of TREE_PARENTS.
        With graph, the verify is replayed from a CUDA graph of the bucket's size, padded rows included."""
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        dev, n, bs = self.device, DRAFT_TOKENS, len(reqs)
        prefix = [len(r.mixed) for r in reqs]
        parents = self.parents
        mixed, gate, beta = self._tokens(bs * n)
        before = self._temporal()
        if graph:
            out = self._graph_forward(ForwardMode.TARGET_VERIFY, reqs, prefix, mixed, gate, beta)
        else:
            positions = [p + _depth(parents, j) for p in prefix for j in range(n)]
            batch = self._base_batch(ForwardMode.TARGET_VERIFY, reqs, prefix, bs * n, positions)
            batch.spec_info = self._spec_info(batch.input_ids, batch.positions, batch.seq_lens_cpu, bs)
            out = self._forward(batch, mixed, gate, beta)
        expected, snapshots = [], []
        for i, r in enumerate(reqs):
            rows = slice(i * n, (i + 1) * n)
            for j in range(n):
                path = _path(parents, j)
                o, states = self._continue(r, mixed[rows][path], gate[rows][path], beta[rows][path])
                expected.append(o[-1:])
                snapshots.append(states[-1])
        self._record(phase, out, torch.cat(expected), [], before)
        # SGLang's post-verify path: the accepted step's snapshot and conv window become the pool state
        last = [a - 1 for a in accept]
        self.backend.update_mamba_state_after_mtp_verify(
            torch.tensor(last, dtype=torch.int64, device=dev), None, None, None
        )
        temporal = self._temporal()
        err = max((temporal[r.slot].double() - snapshots[i * n + last[i]]).abs().max().item()
                  for i, r in enumerate(reqs))  # fmt: skip
        for i, r in enumerate(reqs):
            rows, path = slice(i * n, (i + 1) * n), _path(parents, last[i])
            self._commit(
                r, (mixed[rows][path], gate[rows][path], beta[rows][path]), snapshots[i * n + last[i]]
            )
        self.report.errors.append(PhaseError(f"{phase} commit", self.arm, 0.0, err))
        self.report.states[f"{phase} commit"] = temporal[[r.slot for r in reqs]]
        self._check_untouched(before, temporal, {r.slot for r in reqs}, f"{phase} commit")

    def _graph_forward(self, mode, reqs, seq_lens, mixed, gate, beta):
        """SGLang's graph-runner protocol for one bucket: graph state sized once, capture on dummy rows
        (request-pool row 0, whose mamba slot is the pool's padding slot), then per replay the backend's
        out-of-graph metadata for the real rows plus padding, new inputs copied into the static buffers."""
        import torch
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        dev, bs = self.device, self.shape.graph_bs
        per = DRAFT_TOKENS if mode.is_target_verify() else 1
        if len(reqs) > bs:
            raise ValueError(f"{len(reqs)} requests do not fit the graph bucket {bs}")

        def ctx():
            return forward_context(ForwardContext(attn_backend=self.backend))

        if mode not in self._graphs:
            self.backend.init_cuda_graph_state(bs, bs * per)
            pad = _Request(0, 0, [], [], [], [])
            fb = self._base_batch(mode, [pad] * bs, [1] * bs, bs * per, [0] * (bs * per))
            if mode.is_target_verify():
                fb.spec_info = self._spec_info(fb.input_ids, fb.positions, fb.seq_lens_cpu, bs)
                fb.spec_info.retrieve_next_token = fb.spec_info.retrieve_next_sibling = None
            static = (
                torch.zeros(bs * per, self.dim, dtype=self.act_dtype, device=dev),
                torch.zeros(bs * per, self.H * self.D, dtype=self.act_dtype, device=dev),
                torch.zeros(bs * per, self.H, dtype=self.act_dtype, device=dev),
            )
            decode = mode.is_decode()

            def run_once():
                a = static[1] if decode else static[1].unsqueeze(0)
                return self.layer(fb, mixed_qkv=static[0], a=a, b=static[2].unsqueeze(0))

            with torch.no_grad(), ctx():
                self.backend.init_forward_metadata_out_graph(fb, in_capture=True)
                torch.cuda.synchronize()
                for _ in range(2):  # the runner's warm-up runs before capture
                    run_once()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = run_once()
            self._graphs[mode] = (graph, static, static_out)
        graph, static, static_out = self._graphs[mode]
        n_real = len(reqs)
        fb = self._base_batch(mode, reqs, seq_lens, n_real * per, [0] * (n_real * per))
        fb.batch_size = bs
        fb.req_pool_indices = torch.cat(
            [fb.req_pool_indices, torch.zeros(bs - n_real, dtype=torch.int64, device=dev)]
        )
        fb.seq_lens_cpu = torch.cat([fb.seq_lens_cpu, torch.ones(bs - n_real, dtype=torch.int32)])
        fb.num_padding = bs - n_real
        if mode.is_target_verify():
            fb.spec_info = self._spec_info(fb.input_ids, fb.positions, fb.seq_lens_cpu, bs, real_bs=n_real)
        for buf, value in zip(static, (mixed, gate, beta), strict=True):
            buf.zero_()
            buf[: value.shape[0]].copy_(value.to(dev))
        with torch.no_grad(), ctx():
            self.backend.init_forward_metadata_out_graph(fb)
            graph.replay()
        out = static_out.reshape(bs * per, self.H, self.D)
        if not torch.isfinite(out[n_real * per :]).all():
            raise AssertionError("padded rows of the graph's output are not finite")
        return out[: n_real * per].float().cpu()

    # -- reference and checks --------------------------------------------------------------------------

    def _temporal(self):
        return self.pool.mamba_pool.mamba_cache.temporal[0].float().cpu()

    def _commit(self, r: _Request, rows, state) -> None:
        """Tokens (pre-conv, gate, beta rows) join the request; `state` is the reference state after them."""
        r.mixed += list(rows[0])
        r.gate += list(rows[1])
        r.beta += list(rows[2])
        r.ref_state = state

    def _continue(self, r: _Request, mixed, gate, beta):
        """fp64 outputs [T, H, D] and states [T, H, D, D] of tokens that follow r's committed ones."""
        import torch
        import torch.nn.functional as F
        from kdakit.kernels import reference as R

        H, D, width = self.H, self.D, CONV_KERNEL - 1
        context = r.mixed[-width:] if r.mixed else []
        zeros = [torch.zeros(self.dim, dtype=mixed.dtype)] * (width - len(context))
        x = torch.cat([torch.stack(zeros + context).reshape(width, self.dim), mixed]).double()
        w = self.conv_w.double()  # [dim, CONV_KERNEL]: w[:, -1] weighs the current token
        T = mixed.shape[0]
        qkv = F.silu(sum(w[:, j] * x[j : j + T] for j in range(CONV_KERNEL)))
        q = qkv[:, : H * D].reshape(T, H, D)
        k = qkv[:, H * D : 2 * H * D].reshape(T, H, D)
        v = qkv[:, 2 * H * D :].reshape(T, H, D)
        g = R.kda_gate(gate.reshape(T, H, D), self.A_log, self.dt_bias, GATE_LOWER_BOUND)
        b = torch.sigmoid(beta.double())
        start = r.ref_state if r.ref_state is not None else torch.zeros(H, D, D, dtype=torch.float64)
        return R.kda_recurrence(q, k, v, g, b, start, D**-0.5, True)

    def _check_untouched(self, before, after, written: set[int], phase: str) -> None:
        """Every pool slot outside the batch keeps its bytes (padded rows and wrong slots write nothing)."""
        import torch

        # slot 0 is the pool's padding slot: graph capture's dummy rows write it by design (a discard row)
        others = [s for s in range(1, before.shape[0]) if s not in written]
        if not torch.equal(before[others], after[others]):
            changed = [s for s in others if not torch.equal(before[s], after[s])]
            raise AssertionError(f"{self.arm} {phase}: pool slots outside the batch were written: {changed}")

    def _record(self, phase: str, out, expected, reqs: list[_Request], before=None) -> None:
        import math

        out_err = (out.double() - expected).abs().max().item()
        if not math.isfinite(out_err):
            out_err = math.inf
        temporal = self._temporal()
        if before is not None:
            self._check_untouched(before, temporal, {r.slot for r in reqs}, phase)
        state_err = 0.0
        for r in reqs:
            err = (temporal[r.slot].double() - r.ref_state).abs().max().item()
            state_err = max(state_err, err if math.isfinite(err) else math.inf)
        self.report.errors.append(PhaseError(phase, self.arm, out_err, state_err))
        self.report.phases.append(phase)
        self.report.outputs[phase] = out
        if reqs:
            self.report.states[phase] = temporal[[r.slot for r in reqs]]


def _host_time(run, reps: int) -> float:
    """Microseconds of host time per call of `run`, issued while the GPU sleeps well past all of them
    (nothing waits for the GPU, so only the launching is timed)."""
    import time

    import torch

    torch.cuda._sleep(int(2e8))  # ~0.1 s at the H200's clocks
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed * 1e6 / reps


TREE_PARENTS = [-1, 0, 0, 1, 2, 3]  # two branches: 0-1-3-5 and 0-2-4


def _path(parents: list[int], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def _depth(parents: list[int], node: int) -> int:
    return len(_path(parents, node)) - 1


def run(
    arm: str, shape: Shape, *, topk: int = 1, device: str | None = None, seed: int = 0
) -> LifecycleReport:
    """The whole lifecycle for one arm (module docstring); returns the per-phase errors. CUDA graphs
    (shape.graph_bs > 0, on a GPU) replay verify, and decode on a second backend: a server's target
    model captures one graph runner per forward mode."""
    import dataclasses

    with Lifecycle(
        arm, dataclasses.replace(shape, prefill_buckets=()), topk=topk, device=device, seed=seed
    ) as life:
        graphs = shape.graph_bs > 0 and life.device != "cpu"
        reqs = [life.new_request() for _ in shape.prefill_lens]
        life.extend(reqs, list(shape.prefill_lens))
        for _ in range(shape.decode_steps):
            life.decode(reqs)
        life.verify(reqs, [1 + (i * 2) % DRAFT_TOKENS for i in range(len(reqs))], "verify 1")
        # round 2: one request finished, the others in another batch order (other scratch rows)
        second = reqs[::-1][: max(1, len(reqs) - 1)]
        life.verify(second, [DRAFT_TOKENS - i % DRAFT_TOKENS for i in range(len(second))], "verify 2")
        life.decode(second)
        if graphs:
            accept = [1 + i % DRAFT_TOKENS for i in range(len(second))]
            life.verify(second, accept, "verify graph 1", graph=True)
            fresh = life.new_request()  # a new slot joins the bucket
            life.extend([fresh], [shape.prefill_lens[-1]])
            third = [fresh, *second[1:]]
            accept = [DRAFT_TOKENS - i % 3 for i in range(len(third))]
            life.verify(third, accept, "verify graph 2", graph=True)
        report = life.report
    if graphs:
        with Lifecycle(arm, shape, topk=topk, device=device, seed=seed + 1) as life:
            reqs = [life.new_request() for _ in shape.prefill_lens]
            life.extend(reqs, list(shape.prefill_lens))
            life.decode(reqs, graph=True)
            life.decode(reqs[1:], graph=True)  # fewer real rows, more padding
            report.errors += [e for e in life.report.errors if "graph" in e.phase]
            report.phases += [p for p in life.report.phases if "graph" in p]
    if shape.prefill_buckets:
        with Lifecycle(arm, shape, topk=topk, device=device, seed=seed + 2) as life:
            prefill_graph_phases(life)
            report.errors += life.report.errors
            report.phases += life.report.phases
            report.outputs.update(life.report.outputs)
            report.states.update(life.report.states)
            report.routes.update(life.report.routes)
    return report


PREFILL_GRAPH_PHASES = ("prefill graph 1 token", "prefill graph mixed", "prefill graph continued",
                        "prefill graph too many sequences")  # fmt: skip


def prefill_graph_phases(life: Lifecycle) -> None:
    """Prefills through SGLang's breakable prefill CUDA graph protocol (`Lifecycle._prefill_graph_forward`):
    one token alone in the smallest bucket; the shape's prompts (unaligned; those of 64 tokens or more
    tracked) padded into a bucket; a continued prefill (prefixes in the pool, one fresh aligned 64-token
    prompt tracked at its final state); more sequences than SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS (eager)."""
    one_token, mixed, continued, too_many = PREFILL_GRAPH_PHASES
    first = life.new_request()
    life.extend([first], [1], one_token, graph=True)
    prompts = [life.new_request() for _ in life.shape.prefill_lens]
    life.extend(prompts, list(life.shape.prefill_lens), mixed, graph=True)
    fresh = life.new_request()
    life.extend([first, *prompts[:2], fresh], [40, 5, 3, 64], continued, graph=True)
    many = [life.new_request() for _ in range(life.shape.prefill_graph_max_seqs + 1)]
    life.extend(many, [3] * len(many), too_many, graph=True)


# Agreement bounds, absolute on unit-scale data, per phase: against the fp64 reference and against the
# triton arm on the same inputs. Both helion arms keep SGLang's bf16 chunk intermediates in prefill, so the
# state after a long extend carries bf16 rounding; decode and verify run fp32 state math.
TOLERANCES = {
    "cpu": {"out": 2e-2, "state": 5e-2},  # fp32 activations (Triton's interpreter)
    "cuda": {"out": 5e-2, "state": 1e-1},  # bf16 activations and conv states, as served
}


def problems(
    report: LifecycleReport, baseline: LifecycleReport | None = None, device: str = "cpu"
) -> list[str]:
    """Every phase whose error exceeds TOLERANCES, against the reference and (given) the baseline arm."""
    tol = TOLERANCES["cpu" if device == "cpu" else "cuda"]
    found = []
    for e in report.errors:
        if not (e.out <= tol["out"] and e.state <= tol["state"]):
            found.append(
                f"{report.arm} {e.phase}: output error {e.out:.3g}, state error {e.state:.3g} vs fp64"
            )
    if baseline is not None:
        for kind, mine, theirs, bound in (
            ("output", report.outputs, baseline.outputs, tol["out"]),
            ("state", report.states, baseline.states, tol["state"]),
        ):
            for phase, value in mine.items():
                diff = (value.double() - theirs[phase].double()).abs().max().item()
                if not diff <= bound:
                    found.append(f"{report.arm} {phase}: {kind} differs from {baseline.arm} by {diff:.3g}")
    return found


PREFILL_GRAPH_CASES = ((16,), (512,), (4096,))


def prefill_graph_cost(heads: int | None = None, cases=PREFILL_GRAPH_CASES, reps: int = 20) -> list[dict]:
    """Per KDA layer and prefill, every arm: in SGLang's breakable prefill CUDA graph as served (the extend in
    the graph or an eager break, as SGLang decides for the arm) and eager (prefill graphs off, or more
    sequences than the graph's tables hold); eager also with its host time per call."""
    import torch

    from kdakit.facts import profiles

    rows = []
    shape = served_shape(heads, graph_bs=0, prefill_buckets=(1,))
    for arm in profiles.kernel_set_arms():
        with Lifecycle(arm, shape) as life:
            for lens in cases:
                for mode in ("graph", "eager"):
                    row = {"arm": arm, "lens": list(lens), "mode": mode}
                    try:
                        row.update(life.time_prefill(list(lens), mode=mode, reps=reps))
                    except Exception as exc:  # noqa: BLE001 - a mode that cannot run is a result too
                        row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                        torch.cuda.synchronize()
                    rows.append(row)
    return rows


def served_shape(
    heads: int | None = None, state_dtype: str = "float32", graph_bs: int = 8, **changes
) -> Shape:
    """A served layer's shape (the PR's heads per GPU and head dim; prompts of 1, 37 and 300 tokens)."""
    return Shape(
        heads=heads or shapes.get("model", "heads"),
        head_dim=shapes.get("model", "head_dim"),
        state_dtype=state_dtype,
        prefill_lens=(1, 37, 300),
        graph_bs=graph_bs,
        **changes,
    )


def summary(report: LifecycleReport) -> str:
    out, state = report.max_errors()
    return (
        f"{report.arm} {report.shape.label} top-k {report.topk}: {len(report.phases)} phases, "
        f"max error vs fp64 output {out:.2e} state {state:.2e} ({report.dispatcher})"
    )

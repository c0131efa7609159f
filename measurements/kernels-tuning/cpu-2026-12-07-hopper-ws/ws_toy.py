"""Does Triton's warp specialization take the state pass's loop on Hopper? A plain Triton toy of the step's
shape (TMA-loaded W, kg and U; W S, v_new, the state update, an output product) compiled for sm_90a on a
machine without a GPU, with and without `tl.range(..., warp_specialize=True)`. It prints the partitions
Triton made and what each one's loop runs.

    python ws_toy.py        # under whichever triton the interpreter imports
"""

import re

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def chain(w_ptr, kg_ptr, u_ptr, o_ptr, T, HV: tl.constexpr, K: tl.constexpr, BV: tl.constexpr,
          WS: tl.constexpr):  # fmt: skip
    hv = tl.program_id(0)
    vt = tl.program_id(1)
    w_d = tl.make_tensor_descriptor(w_ptr, shape=[T, HV, K], strides=[HV * K, K, 1], block_shape=[64, 1, K])
    kg_d = tl.make_tensor_descriptor(kg_ptr, shape=[T, HV, K], strides=[HV * K, K, 1], block_shape=[64, 1, K])
    u_d = tl.make_tensor_descriptor(u_ptr, shape=[T, HV, K], strides=[HV * K, K, 1], block_shape=[64, 1, BV])
    state = tl.zeros([K, BV], dtype=tl.float32)
    rows = tl.arange(0, 64)
    cols = vt * BV + tl.arange(0, BV)
    for t in tl.range(0, T, 64, warp_specialize=WS):
        w = w_d.load([t, hv, 0]).reshape(64, K)
        kg = kg_d.load([t, hv, 0]).reshape(64, K)
        u = u_d.load([t, hv, vt * BV]).reshape(64, BV).to(tl.float32)
        v_new = (u - tl.dot(w, state.to(tl.bfloat16))).to(tl.bfloat16)
        state = state * 0.99 + tl.dot(tl.trans(kg), v_new)
        o = tl.dot(w, state.to(tl.bfloat16))
        tl.store(o_ptr + (t + rows)[:, None] * (HV * K) + hv * K + cols[None, :], o.to(tl.bfloat16))


def compile_toy(ws: bool):
    signature = {"w_ptr": "*bf16", "kg_ptr": "*bf16", "u_ptr": "*bf16", "o_ptr": "*bf16", "T": "i32",
                 "HV": "constexpr", "K": "constexpr", "BV": "constexpr", "WS": "constexpr"}  # fmt: skip
    constants = {"HV": 16, "K": 128, "BV": 16, "WS": ws}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
    source = ASTSource(chain, signature, constants, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})


def partitions(ttgir: str) -> list[str]:
    """Per region of a ttg.warp_specialize (its default, then partition0, partition1, ...): the ops its loop
    runs that matter here (TMA copies, local loads, dots, stores)."""
    parts = re.split(r"\n\s*(default \{|partition\d+\()", ttgir)
    found = []
    for head, body in zip(parts[1::2], parts[2::2], strict=False):
        ops = re.findall(r"(async_tma_copy_global_to_local|ttg\.local_load|warp_group_dot |tt\.store)", body)
        name = head.rstrip("({ ").strip() or "default"
        counts = {op.strip(): ops.count(op) for op in dict.fromkeys(ops)}
        found.append(f"{name}: {counts}")
    return found


def main() -> None:
    print("triton", triton.__version__)
    for ws in (False, True):
        try:
            compiled = compile_toy(ws)
        except Exception as exc:  # the compile's own error is the answer
            print(f"warp_specialize={ws}: compile failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        meta = compiled.metadata
        print(f"warp_specialize={ws}: {meta.num_warps} warps, {meta.shared} B shared memory")
        for line in partitions(compiled.asm["ttgir"]):
            print("  ", line)


if __name__ == "__main__":
    main()

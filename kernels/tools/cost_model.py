"""What a KDA kernel call must at least cost: the bytes it moves and the FLOPs it computes, and the floors
they imply (bytes over the measured copy bandwidth; FLOPs over a stated or measured arithmetic rate).

Pure Python: the bench, the table and the tests read the same functions.
"""

from __future__ import annotations


def state_bytes(hv: int, k: int, v: int, state_itemsize: int = 4) -> int:
    return hv * v * k * state_itemsize


def decode_bytes(batch: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4) -> int:
    per_request = (
        2 * state_bytes(hv, k, v, state)  # state read and written back
        + (2 * h * k + hv * v) * act  # mixed_qkv
        + hv * k * act  # raw gate a
        + hv * act  # raw beta b
        + hv * v * act  # output
        + 4  # slot index
    )
    params = hv * 4 + hv * k * 4  # A_log, dt_bias (fp32)
    return batch * per_request + params


def verify_bytes(
    batch: int, tokens: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4
) -> int:
    per_request = (
        state_bytes(hv, k, v, state)  # committed state read once, never written
        + tokens * state_bytes(hv, k, v, 4)  # one fp32 snapshot written per candidate
        + tokens * ((2 * h * k + hv * v) * act + hv * k * act + hv * act + hv * v * act)
        + 2 * 4  # slot and snapshot-row indices
    )
    params = hv * 4 + hv * k * 4 + (batch + 1) * 4
    return batch * per_request + params


def prefill_bytes(
    batch: int, tokens: int, h: int, hv: int, k: int, v: int, act: int = 2, state: int = 4
) -> int:
    total = batch * tokens
    per_token = (2 * h * k + hv * v) * act + hv * k * act + hv * act + hv * v * act  # q k v g beta in, o out
    return total * per_token + batch * 2 * state_bytes(hv, k, v, state) + hv * 4 + hv * k * 4


def floor_us(nbytes: int, bandwidth_bytes_per_s: float | None) -> float | None:
    if not bandwidth_bytes_per_s:
        return None
    return nbytes / bandwidth_bytes_per_s * 1e6


CHUNK = 64  # the chunk length of every chunked KDA prefill (SGLang's Triton and Helion, kdakit, FLA)


def prefill_flops(batch: int, tokens: int, h: int, hv: int, k: int, v: int, chunk: int = CHUNK) -> int:
    """FLOPs (2 per multiply-add) of the chunked prefill's matrix products, per value head and chunk: the
    intra-chunk q·k and k·k scores (2 C²K), the triangular solve (C³/3), W and U (C²K + C²V), the state
    pass's W·S, q·S and kᵀ·v_new (3 CKV) and the scores times v_new (C²V). Element-wise work (gates, norms,
    decays) is left out: the floor is what the tensor cores must at least do."""
    chunks = batch * -(-tokens // chunk)
    c = chunk
    macs = 2 * c * c * k + c**3 // 3 + c * c * k + c * c * v + 3 * c * k * v + c * c * v
    return 2 * macs * chunks * hv


def compute_floor_us(flops: int, flops_per_s: float | None) -> float | None:
    """The time `flops` take at a rate (FLOP/s): the compute floor beside the HBM floor."""
    if not flops_per_s:
        return None
    return flops / flops_per_s * 1e6

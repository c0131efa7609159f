"""Pieces of the token-by-token KDA update that decode and verify share: plain Python helpers that Helion
inlines into each kernel body, so both kernels run the same gate and program layout.

`tuned.source_sha256` hashes these helpers with every kernel that calls them: an edit here stales the tuned
configs of both kernels.
"""

from __future__ import annotations

import helion.language as hl
import torch

LOG2E = 1.4426950408889634


def program_heads(tile_request, tile_hv, H, HV, K):
    """A (request, value head, V tile) program's request and value head, the query/key head that value
    head reads (HV // H value heads share one) and the key lanes."""
    request = tile_request.id
    hv = tile_hv.id
    return request, hv, hv // (HV // H), hl.arange(K)


def gate_log_decay(x, decay_rate, lower_bound, log2e, bounded_gate):
    """(log decay, softplus) of the raw gate plus dt_bias `x`, per key: the log decay (natural log) is
    lower_bound * sigmoid(decay_rate * x) for the bounded gate (softplus None), else
    -decay_rate * softplus(x).

    The kernel binds the softplus to its own name, which Helion gives the generated variable (the code the
    tuned configs were measured on), and passes its own LOG2E: a module global the kernel body reads is a
    launch argument, one read here would be a literal in the generated code."""
    if bounded_gate:
        return lower_bound * torch.sigmoid(decay_rate * x), None
    softplus = torch.where(x <= 20.0, torch.log(1.0 + torch.exp2(x * log2e)), x)
    return -decay_rate * softplus, softplus

"""Can one Helion kernel hold the state pass's three V-tile widths, chosen on the device? Two toy kernels
under the Triton interpreter (TRITON_INTERPRET=1), each copying x's columns in tiles of 16, 32 or 64 as
`sel[0]` picks, one program per tile: `named` writes each width's tile loop out with a name of its own,
`unrolled` writes the loop once inside `hl.static_range(3)`. (Helion reads module globals: a global named
like a kernel variable is refused, hence `main`'s names.)

    .venv/bin/python measurements/kernels-tuning/cpu-2026-12-07-state-order/width-branches.py
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import helion
import helion.language as hl
import torch

CONFIG = helion.Config(block_sizes=[], num_warps=4, num_stages=1)


@helion.kernel(static_shapes=False, config=CONFIG)
def named(x: torch.Tensor, sel: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    V = hl.specialize(x.size(1))
    for g in hl.grid(4):
        which = sel[0]
        row = hl.arange(8)
        if which == 0:
            if g < V // 16:
                for tv16 in hl.tile(g * 16, g * 16 + 16, block_size=16):
                    val = hl.load(x, [row[:, None], tv16.index[None, :]])
                    hl.store(out, [row[:, None], tv16.index[None, :]], val * 1)
        if which == 1:
            if g < V // 32:
                for tv32 in hl.tile(g * 32, g * 32 + 32, block_size=32):
                    val = hl.load(x, [row[:, None], tv32.index[None, :]])
                    hl.store(out, [row[:, None], tv32.index[None, :]], val * 2)
        if which == 2:
            if g < V // 64:
                for tv64 in hl.tile(g * 64, g * 64 + 64, block_size=64):
                    val = hl.load(x, [row[:, None], tv64.index[None, :]])
                    hl.store(out, [row[:, None], tv64.index[None, :]], val * 3)
    return out


@helion.kernel(static_shapes=False, config=CONFIG)
def unrolled(x: torch.Tensor, sel: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    V = hl.specialize(x.size(1))
    for g in hl.grid(4):
        which = sel[0]
        row = hl.arange(8)
        for b in hl.static_range(3):
            if which == b:
                if g < V // (16 << b):
                    for tv in hl.tile(g * (16 << b), g * (16 << b) + (16 << b), block_size=16 << b):
                        val = hl.load(x, [row[:, None], tv.index[None, :]])
                        hl.store(out, [row[:, None], tv.index[None, :]], val * (b + 1))
    return out


if __name__ == "__main__":
    x = torch.randn(8, 64)
    for kernel in (named, unrolled):
        for pick in range(3):
            out = torch.zeros_like(x)
            try:
                kernel(x, torch.tensor([pick]), out)
                print(kernel.fn.__name__, pick, "right" if torch.equal(out, x * (pick + 1)) else "WRONG")
            except Exception as exc:  # the toy reports what Helion says and goes on
                print(kernel.fn.__name__, pick, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")

"""kdakit.kernels: kdakit's Helion KDA kernels as SGLang imports them at run time.

- `decode`, `verify`, `prefill`: the Helion entry points SGLang's patched Helion KDA backend calls;
- `recurrent`: the kernel-body helpers decode and verify share (gate, program layout);
- `reference`: their fp64 reference;
- `tuned` (+ `configs/`): the per-SKU tuned config files and their selection at run time;
- `shapes` (+ `shapes.toml`): the PR's shapes and the kernel tools' defaults;
- `integration` (+ the SGLang patch): which modules the patched adapter takes its entry points from.

The tools that time, tune and compare these kernels are `kdakit.kernels.tools`. Importing this package
imports nothing else: the patched SGLang imports `kdakit.kernels.integration` at start-up, before torch.
"""

__all__ = ["decode", "verify", "prefill", "recurrent", "reference", "tuned", "shapes", "integration"]

"""kdakit.kernels.tools: what times, tunes and compares kdakit's kernels (`kdakit kernels ...`).

- `cli`: the `kdakit kernels` subcommands;
- `bench` (+ `bench_inputs`, `cost_model`, `table`, `bench_record`, `bench_table`): the microbenchmark
  against SGLang's kernels, its inputs, floors, printed table, records, and BENCH.md's generated table;
- `lifecycle`: a request lifecycle through SGLang's own KDA backend (tests, self-test, `served`);
- `autotune`: ahead-of-time config tuning per SKU, writing kernels/configs/;
- `timing`: the one CUDA-graph timing method both use;
- `upstream`: SGLang's own KDA kernels, installed or extracted from the pinned wheel;
- `ptxas`: register and spill counts of the prefill kernels for Hopper, without a GPU;
- `testing`, `interpret`: kernel inputs and the Triton CPU interpreter shim (tests, autotune, self-test).
"""

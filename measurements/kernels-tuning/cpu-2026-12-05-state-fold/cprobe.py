"""Probe: whole chunk_kda and per-kernel µs (torch profiler, 20 calls) for prefill module variants in one
process, interleaved over rounds, with each output's and final state's largest difference from the first
arm. Rows appended as they finish.

The modules share kdakit.kernels.tuned, whose selection cache is keyed by kernel name and bucket: without a
reset, every module after the first would run the first one's default config (a variant's own default, such
as gate-1's tile or foldtma's TMA indexing, would be silently replaced). Each arm resets it first."""
import importlib, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(cases, out_path, arms, rounds=2):
    import kda_stubs  # noqa
    import torch
    from kdakit.kernels import tuned
    from kdakit.kernels.tools import profile, bench_inputs
    mods = {a: importlib.import_module("kdakit.kernels.prefill" if a == "main" else a) for a in arms}
    for case in cases:
        b, rest = case.split("x"); t, h = rest.split(":")
        inputs = profile._inputs(int(b), int(t), int(h))
        ref = None
        for rnd in range(rounds):
            for name in arms:
                mod = mods[name]
                tuned.reset()  # this module's own defaults, not the previous arm's (see the docstring)
                pool = inputs["pool0"].clone()

                def call():
                    inputs["x"]["qkv"].copy_(inputs["qkv0"])
                    pool.copy_(inputs["pool0"])
                    return bench_inputs.prefill_call(mod.chunk_kda, inputs["cfg"], inputs["x"], inputs["A_log"],
                                                     inputs["dt_bias"], pool, inputs["idx"], inputs["cu"])
                t0 = time.time()
                row = {"case": case, "arm": name, "round": rnd}
                try:
                    for _ in range(3):
                        call()
                    out = call().float().clone()
                    torch.cuda.synchronize()
                    if ref is None:
                        ref = (out, pool.float().clone())
                    row["out_err"] = float((out - ref[0]).abs().max())
                    row["state_err"] = float((pool.float() - ref[1]).abs().max())
                    per = profile.summarize(profile.kernel_times(call, 20))
                    row["total"] = per["total_us"]
                    row["kernels"] = {k: round(v, 2) for k, v in per["kernels"].items()}
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                row["s"] = round(time.time() - t0, 1)
                with open(out_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], sys.argv[3].split(","))

"""Probe: intra-chunk configs (grid order, warps, K slice) for main's intra and for the one-pass variant
(prefill_intra2.py beside this file), in one process, per case: each (arm, config)'s whole chunk_kda and
intra kernel (torch profiler, 20 calls, µs per call), and its output's and final state's largest difference
from main at its shipped configs. Rows are appended as they finish."""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def configs():
    out = []
    for order in (None, [2, 1, 0], [1, 2, 0]):
        for bk, w, st in ((32, 1, 2), (16, 2, 2), (32, 4, 2), (16, 4, 2)):
            cfg = {"block_sizes": [bk], "num_warps": w, "num_stages": st, "indexing": "pointer"}
            if order:
                cfg["loop_orders"] = [order]
            out.append(cfg)
    return out


def main(cases, out_path, arms_wanted):
    import kda_stubs  # noqa
    import torch
    from kdakit.kernels import prefill
    from kdakit.kernels.tools import profile, bench_inputs
    modules = {"main": prefill}
    if "intra2" in arms_wanted:
        import prefill_intra2
        modules["intra2"] = prefill_intra2
    for case in cases:
        b, rest = case.split("x"); t, h = rest.split(":")
        inputs = profile._inputs(int(b), int(t), int(h))

        def runner(mod):
            pool = inputs["pool0"].clone()

            def call():
                inputs["x"]["qkv"].copy_(inputs["qkv0"])
                pool.copy_(inputs["pool0"])
                return bench_inputs.prefill_call(mod.chunk_kda, inputs["cfg"], inputs["x"], inputs["A_log"],
                                                 inputs["dt_bias"], pool, inputs["idx"], inputs["cu"])
            return call, pool

        prefill.configure({})
        call, pool = runner(prefill)
        for _ in range(3):
            call()
        ref_out, ref_pool = call().float().clone(), pool.float().clone()
        per = profile.summarize(profile.kernel_times(call, 20))
        row = {"case": case, "arm": "main", "cfg": "shipped", "total": per["total_us"], "kernels": per["kernels"]}
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        for name in arms_wanted:
            mod = modules[name]
            for cfg in configs():
                t0 = time.time()
                row = {"case": case, "arm": name, "cfg": cfg}
                try:
                    mod.configure({"intra": cfg})
                    call, pool = runner(mod)
                    for _ in range(3):
                        call()
                    out = call().float().clone()
                    torch.cuda.synchronize()
                    row["out_err"] = float((out - ref_out).abs().max())
                    row["state_err"] = float((pool.float() - ref_pool).abs().max())
                    row["finite"] = bool(torch.isfinite(out).all())
                    per = profile.summarize(profile.kernel_times(call, 20))
                    row["total"] = per["total_us"]
                    row["intra"] = next((v for k, v in per["kernels"].items() if "intra" in k), None)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                row["s"] = round(time.time() - t0, 1)
                with open(out_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
            mod.configure({})


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], sys.argv[3].split(",") if len(sys.argv) > 3 else ["main", "intra2"])

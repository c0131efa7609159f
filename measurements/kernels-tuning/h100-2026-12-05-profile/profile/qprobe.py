"""Probe: chunk_kda of the installed kdakit (the change) against prefill_old.py (its parent's source) in one
process, per case: output and final-state differences, and per-kernel µs (torch profiler, 20 calls, two
interleaved rounds). Rows are appended as they finish. PROBE_EXTRA names more sources beside this file (each a
module with a chunk_kda); an arm that fails to import or to run is recorded as `<arm>_error` and left out of
its case, so the other arms still report."""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(cases, out_path):
    import kda_stubs  # noqa
    import torch
    from kdakit.kernels import prefill
    from kdakit.kernels.tools import profile, bench_inputs
    import prefill_old
    arms = {"old": prefill_old.chunk_kda, "new": prefill.chunk_kda}
    import_errors = {}
    for extra in filter(None, os.environ.get("PROBE_EXTRA", "").split(",")):  # more sources beside this file
        try:
            arms[extra] = __import__(extra).chunk_kda
        except Exception as exc:
            import_errors[f"{extra}_error"] = f"{type(exc).__name__}: {exc}"[:500]
    for case in cases:
        b, rest = case.split("x"); t, h = rest.split(":")
        t0 = time.time()
        row = {"case": case, "prefill_configs_env": os.environ.get("KDAKIT_PREFILL_CONFIGS"), **import_errors}
        try:
            inputs = profile._inputs(int(b), int(t), int(h))
            calls, results = {}, {}
            for name, fn in arms.items():
                pool = inputs["pool0"].clone()

                def call(fn=fn, pool=pool):
                    inputs["x"]["qkv"].copy_(inputs["qkv0"])
                    pool.copy_(inputs["pool0"])
                    return bench_inputs.prefill_call(fn, inputs["cfg"], inputs["x"], inputs["A_log"],
                                                     inputs["dt_bias"], pool, inputs["idx"], inputs["cu"])
                try:
                    for _ in range(3):
                        call()
                    out = call().float().clone()
                    torch.cuda.synchronize()
                except Exception as exc:
                    if name == "old":
                        raise
                    row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:500]
                    continue
                results[name] = (out, pool.float().clone())
                calls[name] = call
            ro, rs = results["old"]
            row["out_ref_max"] = float(ro.abs().max())
            for name in calls:
                if name == "old":
                    continue
                no, ns = results[name]
                tag = "" if name == "new" else f"{name}_"
                row[f"{tag}out_err"] = float((no - ro).abs().max())
                row[f"{tag}state_err"] = float((ns - rs).abs().max())
                row[f"{tag}finite"] = bool(torch.isfinite(no).all())
            for rnd in range(2):
                for name in calls:
                    per = profile.kernel_times(calls[name], 20)
                    s = profile.summarize(per)
                    row[f"{name}{rnd}_total"] = s["total_us"]
                    row[f"{name}{rnd}_kernels"] = s["kernels"]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        row["s"] = round(time.time() - t0, 1)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2])

"""Probe: state-pass variants (function x config), one case per child process (a crashing variant is
skipped and the case restarted after it). Per variant: chunk_kda and its state pass (torch profiler, µs per
call) and the output's and final state's largest difference from the shipped kernel's (variant 0)."""
import json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
BASE = {"block_sizes": [16], "num_warps": 4, "num_stages": 3, "indexing": "pointer"}
VARIANTS = [("shipped", BASE)]
for bv, w, s in [(64, 4, 2), (16, 4, 3), (32, 4, 3), (64, 4, 3), (128, 8, 2), (64, 8, 2), (32, 8, 3)]:
    VARIANTS.append(("vfirst", {"block_sizes": [bv], "num_warps": w, "num_stages": s, "indexing": "pointer"}))
if os.environ.get("PROBE_VARIANTS"):
    VARIANTS = [tuple(v) for v in json.loads(os.environ["PROBE_VARIANTS"])]


def child(case, start, out_path):
    import kda_stubs  # noqa
    import torch
    from kdakit.kernels import prefill
    from kdakit.kernels.tools import profile, bench_inputs
    import state_vfirst
    fns = {"shipped": prefill._FNS["state"], "vfirst": state_vfirst.state_pass_vfirst_fn}
    b, rest = case.split("x"); t, h = rest.split(":")
    inputs = profile._inputs(int(b), int(t), int(h))
    pool = inputs["pool0"].clone()

    def call():
        inputs["x"]["qkv"].copy_(inputs["qkv0"])
        pool.copy_(inputs["pool0"])
        return bench_inputs.prefill_call(prefill.chunk_kda, inputs["cfg"], inputs["x"], inputs["A_log"],
                                         inputs["dt_bias"], pool, inputs["idx"], inputs["cu"])
    ref_path = f"/tmp/vref-{case}.pt"
    for i in range(start, len(VARIANTS)):
        name, cfg = VARIANTS[i]
        row = {"case": case, "i": i, "variant": name, "cfg": cfg}
        print("START", i, flush=True)
        t0 = time.time()
        try:
            prefill._FNS["state"] = fns[name]
            for key in [k for k in prefill._by_config if k[0] == "state"]:
                del prefill._by_config[key]
            prefill._built.pop("state", None)
            prefill._state_plans.clear()
            prefill._fewer_stages.clear()
            prefill.configure({"state": cfg}, widen_state=False)
            for _ in range(3):
                call()
            out = call().float().clone()
            fin = pool.float().clone()
            torch.cuda.synchronize()
            if i == 0:
                torch.save((out.cpu(), fin.cpu()), ref_path)
            ref_out, ref_fin = (x.cuda() for x in torch.load(ref_path))
            row["out_err"] = float((out - ref_out).abs().max())
            row["state_err"] = float((fin - ref_fin).abs().max())
            row["finite"] = bool(torch.isfinite(out).all())
            per = profile.kernel_times(call, 20)
            s = profile.summarize(per)
            row["total_us"] = s["total_us"]
            row["state_us"] = round(sum(v for k, v in per.items() if "state_pass" in k), 2)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        row["s"] = round(time.time() - t0, 1)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def parent(cases, out_path, budget):
    t_end = time.time() + budget
    for case in cases:
        start = 0
        while start < len(VARIANTS) and time.time() < t_end:
            p = subprocess.Popen([sys.executable, "-P", __file__, "child", case, str(start), out_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            last = start
            for line in p.stdout:
                print(line, end="", flush=True)
                if line.startswith("START"):
                    last = int(line.split()[1])
                if time.time() > t_end:
                    p.kill()
                    break
            p.wait()
            if p.returncode == 0:
                break
            with open(out_path, "a") as f:
                f.write(json.dumps({"case": case, "i": last, "variant": VARIANTS[last][0],
                                    "cfg": VARIANTS[last][1], "error": f"process died rc={p.returncode}"}) + "\n")
            start = last + 1


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        parent(sys.argv[2].split(","), sys.argv[3], float(sys.argv[4]))

"""Probe: the prefill state pass under many configs (one case per process; a crashing config is skipped by the
parent, which restarts the case after it). Per config: kdakit's whole chunk_kda and its state pass (torch
profiler, µs per call), and its output vs the module default's."""
import json, subprocess, sys, time, os

CFGS = []
for bv in (16, 32):
    for w in (4, 8):
        for s in (2, 3, 4):
            CFGS.append({"block_sizes": [bv], "num_warps": w, "num_stages": s, "indexing": "pointer"})
CFGS += [
    {"block_sizes": [16], "num_warps": 2, "num_stages": 3, "indexing": "pointer"},
    {"block_sizes": [64], "num_warps": 8, "num_stages": 2, "indexing": "pointer"},
    {"block_sizes": [64], "num_warps": 4, "num_stages": 2, "indexing": "pointer"},
    {"block_sizes": [16], "num_warps": 8, "num_stages": 3, "indexing": "tensor_descriptor"},
]


def child(case, start, out_path):
    import kda_stubs  # noqa
    import torch
    from kdakit.kernels import prefill
    from kdakit.kernels.tools import profile, bench_inputs
    b, rest = case.split("x"); t, h = rest.split(":")
    inputs = profile._inputs(int(b), int(t), int(h))
    ref_path = f"/tmp/ref-{case}.pt"
    for i in range(start, len(CFGS)):
        cfg = CFGS[i]
        row = {"case": case, "i": i, "cfg": cfg}
        print("START", i, flush=True)
        t0 = time.time()
        try:
            prefill.configure({"state": cfg}, widen_state=False)
            call = profile._arm_call(prefill.chunk_kda, inputs)
            for _ in range(3):
                call()
            out = call().float().clone()
            torch.cuda.synchronize()
            if i == 0:
                torch.save(out.cpu(), ref_path)
            ref = torch.load(ref_path).cuda()
            row["max_err_vs_cfg0"] = float((out - ref).abs().max())
            row["finite"] = bool(torch.isfinite(out).all())
            per = profile._profile(call, 20)
            s = profile.summarize(per)
            row["total_us"] = s["total_us"]
            row["state_us"] = round(sum(v for k, v in per.items() if "state_pass" in k), 2)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["s"] = round(time.time() - t0, 1)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def parent(cases, out_path, budget):
    t_end = time.time() + budget
    for case in cases:
        start = 0
        while start < len(CFGS) and time.time() < t_end:
            p = subprocess.Popen([sys.executable, "-P", __file__, "child", case, str(start), out_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            last = start
            for line in p.stdout:
                print(line, end="", flush=True)
                if line.startswith("START"):
                    last = int(line.split()[1])
            p.wait()
            if p.returncode == 0:
                break
            with open(out_path, "a") as f:
                f.write(json.dumps({"case": case, "i": last, "cfg": CFGS[last], "error": f"process died rc={p.returncode}"}) + "\n")
            start = last + 1


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        parent(sys.argv[2].split(","), sys.argv[3], float(sys.argv[4]))

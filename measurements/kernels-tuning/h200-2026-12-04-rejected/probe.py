"""Probe: one prefill kernel of kdakit's chunk_kda under many configs, beside the previous source's chunk_kda
(prefill_old.py, its shipped/default configs). One process per heads count (a crashing config is skipped by the
parent, which restarts after it). Per config and case: whole chunk_kda and the kernel (torch profiler, µs per
call), the output's largest difference from the previous source's, finiteness."""
import json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = os.environ.get("PROBE_KERNEL", "intra")
MARK = {"intra": "intra_chunk", "recompute_wk": "recompute_wk", "gate": "gate_cumsum", "state": "state_pass"}[KERNEL]
CFGS = [None]  # None: the previous source (prefill_old) with its own configs
if KERNEL == "state":
    for bk, w, s in ((16, 4, 3), (16, 4, 4), (32, 4, 3), (16, 8, 3), (16, 2, 3)):
        CFGS.append({"block_sizes": [bk], "num_warps": w, "num_stages": s, "indexing": "pointer"})
else:
    for bk in (16, 32, 64):
        for w in (1, 2, 4):
            for s in (1, 2):
                CFGS.append({"block_sizes": [bk], "num_warps": w, "num_stages": s, "indexing": "pointer"})


def child(heads, cases, start, out_path):
    import kda_stubs  # noqa
    import torch
    sys.path.insert(0, HERE)
    import prefill_old
    from kdakit.kernels import prefill
    from kdakit.kernels.tools import profile
    inputs = {c: profile._inputs(int(c.split("x")[0]), int(c.split("x")[1]), heads) for c in cases}
    refs = {}
    for c in cases:
        call = profile._arm_call(prefill_old.chunk_kda, inputs[c])
        for _ in range(3):
            call()
        refs[c] = call().float().clone()
    for i in range(start, len(CFGS)):
        cfg = CFGS[i]
        print("START", i, flush=True)
        for c in cases:
            row = {"case": f"{c}:{heads}", "i": i, "cfg": cfg or "previous source"}
            t0 = time.time()
            try:
                if cfg is not None:
                    prefill.configure({KERNEL: cfg})
                fn = prefill_old.chunk_kda if cfg is None else prefill.chunk_kda
                call = profile._arm_call(fn, inputs[c])
                for _ in range(3):
                    call()
                out = call().float().clone()
                torch.cuda.synchronize()
                row["max_diff_vs_previous"] = float((out - refs[c]).abs().max())
                row["finite"] = bool(torch.isfinite(out).all())
                per = profile.kernel_times(call, 20)
                s = profile.summarize(per)
                row["total_us"] = s["total_us"]
                row["kernel_us"] = round(sum(v for k, v in per.items() if MARK in k), 2)
                row["kernels"] = {k.replace("_helion__", ""): v for k, v in s["kernels"].items() if "helion" in k}
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            row["s"] = round(time.time() - t0, 1)
            with open(out_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "kernels"}), flush=True)


def parent(groups, out_path, budget):
    t_end = time.time() + budget
    for group in groups:  # "16:1x4096,8x512,1x512"
        heads, cases = group.split(":")
        start = 0
        while start < len(CFGS) and time.time() < t_end:
            p = subprocess.Popen([sys.executable, "-P", __file__, "child", heads, cases, str(start), out_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            last = start
            for line in p.stdout:
                print(line, end="", flush=True)
                if line.startswith("START"):
                    last = int(line.split()[1])
                if time.time() > t_end:
                    p.kill()
            p.wait()
            if p.returncode == 0 or time.time() > t_end:
                break
            with open(out_path, "a") as f:
                f.write(json.dumps({"heads": heads, "i": last, "cfg": CFGS[last], "error": f"process died rc={p.returncode}"}) + "\n")
            start = last + 1


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(int(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4]), sys.argv[5])
    else:
        parent(sys.argv[2].split(";"), sys.argv[3], float(sys.argv[4]))

"""Usage: summarize.py variants.jsonl. cprobe's rows as one table per case: each arm's whole prefill and its
kernels (µs per call, from its faster round), the change from main, and its largest difference from the first
arm's output and final state (cprobe's out_err and state_err; next-call.sh runs main first). Fastest first."""
import json, sys
from collections import defaultdict

SHORT = {"_helion__gate_cumsum_fn": "gate", "_helion__intra_chunk_fn": "intra", "_helion__solve_fn": "solve",
         "_helion__recompute_fn": "recompute", "_helion__state_pass_fn": "state", "_helion__tables_fn": "tables"}
best = defaultdict(dict)  # case -> arm -> row with the lowest total
for line in open(sys.argv[1]):
    row = json.loads(line)
    kept = best[row["case"]].get(row["arm"])
    if "error" in row:
        best[row["case"]].setdefault(row["arm"], row)
    elif kept is None or "error" in kept or row["total"] < kept["total"]:
        best[row["case"]][row["arm"]] = row
for case, arms in best.items():
    main = arms.get("main", {}).get("total")
    print(f"\n{case}\n| arm | total | vs main | " + " | ".join(SHORT.values()) + " | out diff | state diff |")
    print("|---|---:|---:|" + "---:|" * len(SHORT) + "---:|---:|")
    for arm, row in sorted(arms.items(), key=lambda kv: kv[1].get("total", float("inf"))):
        if "error" in row:
            print(f"| {arm} | {row['error'][:80]} |")
            continue
        change = f"{100 * (row['total'] / main - 1):+.1f} %" if main else "-"
        per = [f"{row['kernels'].get(k, 0.0):.1f}" for k in SHORT]
        print(f"| {arm} | {row['total']:.1f} | {change} | " + " | ".join(per)
              + f" | {row['out_err']:.2g} | {row['state_err']:.2g} |")

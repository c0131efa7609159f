#!/usr/bin/env python3
"""A stand-in for `nvidia-smi --query-gpu=... --format=csv,noheader[,nounits]` (standard library only).

State comes from the JSON file named by $FAKE_NVIDIA_SMI (all keys optional):
  {"gpus": 4, "name": "NVIDIA H200", "driver": "580.65.06", "sm_mhz": 1980, "power_w": 420,
   "power_limit_w": 700, "throttle_from_call": null, "throttle_gpu": 0, "reasons": "0x4",
   "throttled_sm_mhz": 1400, "old_driver": false, "fail_calls": [], "fail_always": false}
Call k (counted in <state>.calls) reports GPU `throttle_gpu` with `reasons`, `throttled_sm_mhz` and power at
its limit once k >= throttle_from_call. With "old_driver", clocks_event_reasons.active is refused the way
an older nvidia-smi refuses an unknown field (exit 2), and clocks_throttle_reasons.active answers. Calls
listed in "fail_calls" (or every call with "fail_always") fail the way nvidia-smi does when it cannot reach
the driver (exit 9).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    state_path = Path(os.environ.get("FAKE_NVIDIA_SMI", "/nonexistent"))
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:
        print("fake nvidia-smi: only --query-gpu is supported", file=sys.stderr)
        return 2
    calls = state_path.with_name(state_path.name + ".calls")
    call = int(calls.read_text()) + 1 if calls.is_file() else 1
    calls.write_text(str(call))
    if state.get("fail_always") or call in state.get("fail_calls", []):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    throttle_from = state.get("throttle_from_call")
    rows = []
    for gpu in range(int(state.get("gpus", 4))):
        hot = throttle_from is not None and call >= throttle_from and gpu == state.get("throttle_gpu", 0)
        limit = float(state.get("power_limit_w", 700))
        values = {
            "index": gpu, "name": state.get("name", "NVIDIA H200"),
            "driver_version": state.get("driver", "580.65.06"),
            "clocks.sm": state.get("throttled_sm_mhz", 1400) if hot else state.get("sm_mhz", 1980),
            "clocks.mem": 3201, "power.draw": limit if hot else float(state.get("power_w", 420)),
            "power.limit": limit, "temperature.gpu": 71 if hot else 55, "utilization.gpu": 97,
            "utilization.memory": 40, "memory.used": 120000, "memory.total": 143771,
            "clocks_event_reasons.active": state.get("reasons", "0x4") if hot else "0x0000000000000000",
        }  # fmt: skip
        values["clocks_throttle_reasons.active"] = values["clocks_event_reasons.active"]
        if state.get("old_driver"):
            del values["clocks_event_reasons.active"]
        fields = query.split(",")
        unknown = [f for f in fields if f not in values]
        if unknown:
            print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
            return 2
        rows.append(", ".join(str(values[f]) for f in fields))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

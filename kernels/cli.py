"""`kdakit kernels ...`: the microbenchmark, SGLang's kernels from the pinned wheel, the integration patch."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from kdakit.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("kernels", help="KDA kernel microbenchmark, upstream kernels, SGLang patch")
    kernels = parser.add_subparsers(dest="kernels_command", required=True, metavar="SUBCOMMAND")

    bench = kernels.add_parser(
        "bench",
        help="time SGLang's Triton and Helion KDA kernels and kdakit's on one GPU (the PR's table)",
        description="Decode, verify and prefill on one GPU: CUDA-graph per-call medians, L2-cold slot "
        "rotation, outputs checked against SGLang's Triton, HBM floor from the measured copy bandwidth.",
    )
    bench.add_argument("--phases", default="prefill,decode,verify", help="subset of prefill,decode,verify")
    bench.add_argument("--decode-batches", default="1,16,48")
    bench.add_argument("--verify-batches", default="1,16,48")
    bench.add_argument("--draft-tokens", type=int, default=6)
    bench.add_argument("--prefill-shapes", default="1x4096,1x8192,2x4096", help="BATCHxTOKENS,...")
    bench.add_argument("--heads", type=int, default=16)
    bench.add_argument("--head-dim", type=int, default=128, help="K = V")
    bench.add_argument("--lower-bound", type=float, default=-5.0, help="bounded gate (GLM-5.3: -5)")
    bench.add_argument("--replays", type=int, default=100, help="timed graph replays per arm (>= 60)")
    bench.add_argument(
        "--upstream",
        choices=("auto", "installed", "extracted"),
        default="auto",
        help="SGLang's kernels: the installed package, or extracted from the pinned wheel",
    )
    bench.add_argument("--results-dir", default="results", help="writes RESULTS_DIR/RUN_ID/HOST/")
    bench.add_argument("--run-id", default=None, help="default: kernels-<UTC time>")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument(
        "--configs",
        choices=("shipped", "default", "both"),
        default="shipped",
        help="kdakit kernels' configs: tuned ones shipped for this GPU (fallback: default), the defaults, or "
        "both in one run (arms helion-kdakit and helion-kdakit-default, side by side)",
    )
    bench.set_defaults(func=cmd_bench)

    tune = kernels.add_parser(
        "autotune",
        help="tune kdakit's Helion KDA kernels for this GPU's SKU and write config files (GPU only)",
        description="Helion's autotuner per kernel and shape bucket, then tuned vs default timed under CUDA "
        "graph replay (decode/verify: rotating slots; prefill: in-graph restore of v subtracted); the faster "
        "config is written to OUT/SKU/KERNEL-BUCKET.json.",
    )
    tune.add_argument("--sku", required=True, help="the SKU of this GPU, e.g. h200 (checked against it)")
    tune.add_argument(
        "--kernels",
        default="decode,verify,prefill",
        help="subset of decode, verify (= verify-chain), verify-chain, verify-tree, prefill (= its six "
        "kernels: prefill-gate, prefill-intra, prefill-solve, prefill-recompute-wk, prefill-recompute-u, "
        "prefill-state)",
    )
    tune.add_argument("--heads", default="16,8", help="local KDA heads: 16 at TP4, 8 at TP8")
    tune.add_argument(
        "--batches", default="1,2,4,8,16,24,32,40,48", help="decode/verify batch buckets to tune"
    )
    tune.add_argument(
        "--tokens",
        default="4096,8192",
        help="prefill total-token buckets to tune (of 4096, 8192, 16384; default: the bench's shapes)",
    )
    tune.add_argument("--budget-seconds", type=int, default=60, help="Helion search budget per bucket")
    tune.add_argument(
        "--effort",
        choices=("quick", "full"),
        default="quick",
        help="Helion autotune effort: quick starts from the seeded default (fits a budget of tens of "
        "seconds); full starts from 100 random configs (needs minutes per bucket)",
    )
    tune.add_argument("--out", default=None, help="config folder (default: the package's kernels/configs)")
    tune.add_argument("--dry-run", action="store_true", help="print the plan and target files, tune nothing")
    tune.set_defaults(func=cmd_autotune)

    fetch = kernels.add_parser(
        "fetch-upstream",
        help="extract SGLang's KDA kernel modules from the pinned wheel (pip download if needed)",
    )
    fetch.add_argument("--dest", default=None, help="default: $KDAKIT_UPSTREAM_DIR or ~/.cache/kdakit/")
    fetch.add_argument("--wheel", default=None, help="a local sglang wheel (else found or downloaded)")
    fetch.add_argument("--force", action="store_true", help="extract again even if present")
    fetch.set_defaults(func=cmd_fetch)

    record = kernels.add_parser(
        "record",
        help="print the table of a bench's raw JSON and write its kdakit.result.v1 record beside it",
    )
    record.add_argument("raw", help="a kernels-bench.json written by `kdakit kernels bench`")
    record.add_argument("--run-id", default=None, help="default: the folder above the host folder")
    record.set_defaults(func=cmd_record)

    patch = kernels.add_parser(
        "patch",
        help="apply (or --check) the patch that makes SGLang's Helion KDA backend call kdakit's kernels",
    )
    patch.add_argument("--site-packages", default=None, help="default: where sglang is installed")
    patch.add_argument("--check", action="store_true", help="only report: applies, applied or conflict")
    patch.add_argument("--resolve", action="store_true", help="print which modules SGLang's entry points use")
    patch.set_defaults(func=cmd_patch)


def _positive(value: int, name: str, minimum: int = 1) -> int:
    if value < minimum:
        raise UsageError(f"--{name} must be >= {minimum} (got {value})")
    return value


def config_from_args(args: argparse.Namespace):
    from kdakit.kernels import bench

    return bench.BenchConfig(
        phases=bench.parse_phases(args.phases),
        decode_batches=bench.parse_int_list(args.decode_batches, "decode-batches"),
        verify_batches=bench.parse_int_list(args.verify_batches, "verify-batches"),
        draft_tokens=_positive(args.draft_tokens, "draft-tokens"),
        prefill_shapes=bench.parse_prefill_shapes(args.prefill_shapes),
        heads=_positive(args.heads, "heads"),
        value_heads=_positive(args.heads, "heads"),
        head_dim=_positive(args.head_dim, "head-dim"),
        lower_bound=args.lower_bound,
        replays=_positive(args.replays, "replays", 60),
        seed=args.seed,
        kdakit_configs=getattr(args, "configs", "shipped"),
    )


def cmd_autotune(args: argparse.Namespace) -> int:
    from kdakit.kernels import autotune

    return autotune.run(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from kdakit.kernels import bench, tuned

    tuned.set_mode("shipped" if args.configs == "both" else args.configs)
    cfg = config_from_args(args)
    run_id = args.run_id or datetime.now(UTC).strftime("kernels-%Y%m%d-%H%M%S")
    out_dir = Path(args.results_dir) / run_id / socket.gethostname()
    out_dir.mkdir(parents=True, exist_ok=True)
    result = bench.run(
        cfg,
        upstream_source=args.upstream,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        partial_path=out_dir / "kernels-bench.partial.json",
    )
    (out_dir / "kernels-bench.partial.json").unlink(missing_ok=True)
    result["kernel_configs"] = {"mode": args.configs, "active": tuned.active()}
    raw, record = bench.write_outputs(result, out_dir, run_id)
    print(bench.render_table(result))
    print(tuned.describe_active(args.configs))
    print(f"\nwrote {raw}" + (f" and {record}" if record else ""))
    return 1 if bench.any_failure(result) else 0


def cmd_record(args: argparse.Namespace) -> int:
    from kdakit.kernels import bench

    raw = Path(args.raw)
    try:
        result = json.loads(raw.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{raw}: not a readable kernels-bench JSON ({exc})") from None
    if result.get("kind") != "kdakit.kernels-bench":
        raise UsageError(f"{raw}: not a kernels-bench JSON (kind {result.get('kind')!r})")
    run_id = args.run_id or raw.resolve().parent.parent.name
    print(bench.render_table(result))
    print(f"\nwrote {bench.write_record(result, raw.parent, run_id)}")
    return 1 if bench.any_failure(result) else 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from kdakit.kernels import upstream

    wheel = Path(args.wheel) if args.wheel else None
    if wheel is not None and not wheel.is_file():
        raise UsageError(f"--wheel {wheel}: no such file")
    dest = upstream.extract(Path(args.dest) if args.dest else None, wheel=wheel, force=args.force)
    info = json.loads((dest / upstream.MARKER).read_text())
    print(f"SGLang {info['sglang']} KDA kernels ({len(info['files'])} files from {info['wheel']}) in {dest}")
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    from kdakit.kernels import integration

    site = Path(args.site_packages) if args.site_packages else integration.site_packages_of_sglang()
    if not (site / integration.ADAPTER).is_file():
        raise UsageError(f"{site} holds no SGLang Helion KDA adapter ({integration.ADAPTER})")
    if args.check:
        state = integration.check(site)
        print(f"{integration.patch_file().name}: {state} ({site})")
        return 0 if state in ("applies", "applied") else 1
    if not args.resolve:
        written = integration.apply(site)
        print(f"patched {', '.join(map(str, written))}" if written else f"already patched: {site}")
        return 0
    print(json.dumps(integration.resolve(), indent=1))
    return 0

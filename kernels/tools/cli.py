"""`kdakit kernels ...`: the microbenchmark and its table, autotune, SGLang's kernels from the pinned wheel,
the integration patch."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from kdakit.facts.errors import UsageError


class _DefaultsShown(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help where X is a value (not None/False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _command(kernels: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    """`kdakit kernels NAME` with its handler, help and description from _COMMANDS (option defaults shown)."""
    func, help_text, description = _COMMANDS[name]
    parser = kernels.add_parser(name, formatter_class=_DefaultsShown, help=help_text, description=description)
    parser.set_defaults(func=func)
    return parser


def _results_arguments(parser: argparse.ArgumentParser, run_name: str) -> None:
    """Where a measuring command writes: RESULTS_DIR/RUN_ID/HOST/, the run id by default
    `<run_name>-<UTC time>`."""
    run_id_help = f"the run's folder name (default: {run_name}-<UTC time>)"
    parser.add_argument("--results-dir", default="results", help="writes RESULTS_DIR/RUN_ID/HOST/")
    parser.add_argument("--run-id", default=None, help=run_id_help)


def register(sub: argparse._SubParsersAction) -> None:
    from kdakit.kernels import shapes

    model, bench_defaults, tune_defaults = (shapes.load()[t] for t in ("model", "bench", "autotune"))
    parser = sub.add_parser(
        "kernels",
        help="time, tune and patch kdakit's Helion KDA kernels (microbenchmark, autotune, SGLang patch)",
        description="kdakit's Helion KDA kernels beside SGLang's: time them (bench), tune their configs for "
        "a GPU (autotune), fetch SGLang's kernels from the pinned wheel, and patch SGLang to use kdakit's. "
        "Shapes and defaults: kernels/shapes.toml.",
    )
    kernels = parser.add_subparsers(dest="kernels_command", required=True, metavar="SUBCOMMAND")
    _bench_parser(kernels, model, bench_defaults)
    _autotune_parser(kernels, tune_defaults)
    _served_parser(kernels, model)
    _profile_parser(kernels)
    _sweep_parser(kernels)
    _seeds_parser(kernels)
    _simple_parsers(kernels)


def _bench_parser(kernels: argparse._SubParsersAction, model: dict, bench_defaults: dict) -> None:
    from kdakit.kernels import shapes
    from kdakit.kernels.tools import bench as bench_module
    from kdakit.kernels.tools import upstream

    bench = _command(kernels, "bench")
    phases = ",".join(bench_module.PHASES)
    bench.add_argument(
        "--phases",
        default=",".join(bench_module.DEFAULT_PHASES),
        help=f"a subset of {phases} (verify-layer: conv1d update + recurrence per layer, the CuTe-verify "
        "PR's table, with SGLang's ReplaySSM ring and CuTe where they run)",
    )
    bench.add_argument(
        "--verify-layer-requests",
        default=shapes.csv("bench", "verify_layer_requests"),
        help="requests per layer verify (phase verify-layer)",
    )
    bench.add_argument(
        "--decode-batches", default=shapes.csv("bench", "decode_batches"), help="requests per call"
    )
    bench.add_argument(
        "--verify-batches", default=shapes.csv("bench", "verify_batches"), help="requests per call"
    )
    bench.add_argument(
        "--draft-tokens", type=int, default=model["draft_tokens"], help="tokens per verify request"
    )
    bench.add_argument(
        "--prefill-shapes", default=shapes.csv("bench", "prefill_shapes"), help="BATCHxTOKENS,..."
    )
    bench.add_argument("--heads", type=int, default=model["heads"], help="query and value heads")
    bench.add_argument("--head-dim", type=int, default=model["head_dim"], help="K = V")
    bench.add_argument("--lower-bound", type=float, default=model["lower_bound"], help="bounded gate")
    bench.add_argument(
        "--replays", type=int, default=bench_defaults["replays"],
        help=f"timed graph replays per arm (>= {bench_defaults['min_replays']})",
    )  # fmt: skip
    bench.add_argument(
        "--repeats", type=int, default=bench_defaults["repeats"],
        help="rounds per shape, each timing every arm once in a rotated order; the table shows medians over "
        "the rounds and, from 2 rounds, kdakit / each arm with a 95 %% CI paired by round",
    )  # fmt: skip
    upstream_help = "SGLang's kernels: installed, or extracted from the pinned wheel (auto: installed if any)"
    bench.add_argument("--upstream", choices=upstream.SOURCES, default="auto", help=upstream_help)
    _results_arguments(bench, "kernels")
    bench.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    configs_help = (
        "kdakit kernels' configs: tuned ones shipped for this GPU (fallback: default), the defaults, or both "
        "in one run (arms helion-kdakit and helion-kdakit-default, side by side)"
    )
    bench.add_argument("--configs", choices=bench_module.CONFIG_MODES, default="shipped", help=configs_help)


def _autotune_parser(kernels: argparse._SubParsersAction, tune_defaults: dict) -> None:
    from kdakit.kernels import shapes
    from kdakit.kernels.tuned import PREFILL_KERNELS

    prefill_names = ", ".join(PREFILL_KERNELS)
    tune = _command(kernels, "autotune")
    tune.add_argument("--sku", required=True, help="the SKU of this GPU (kdakit skus; checked against it)")
    tune.add_argument(
        "--kernels",
        default="decode,verify,prefill",
        help="a subset of decode, verify (= verify-chain), verify-tree, prefill (all its kernels) and the "
        f"single prefill kernels {prefill_names}",
    )
    tune.add_argument(
        "--heads", default=shapes.csv("autotune", "heads"), help="local KDA heads (one per TP degree)"
    )
    tune.add_argument("--batches", default=shapes.csv("buckets", "batch"), help="decode/verify batch buckets")
    tune.add_argument(
        "--tokens", default=",".join(map(str, shapes.prefill_token_totals())),
        help=f"prefill total-token buckets (of {shapes.csv('buckets', 'prefill_tokens')})",
    )  # fmt: skip
    tune.add_argument(
        "--budget-seconds",
        type=int,
        default=tune_defaults["budget_seconds"],
        help="Helion search budget per bucket",
    )
    tune.add_argument(
        "--effort",
        choices=("quick", "full"),
        default=tune_defaults["effort"],
        help="Helion autotune effort: quick starts from the seeded default (fits a budget of tens of "
        "seconds); full starts from 100 random configs (needs minutes per bucket)",
    )
    tune.add_argument("--out", default=None, help="config folder (default: the package's kernels/configs)")
    tune.add_argument("--dry-run", action="store_true", help="print the plan and target files, tune nothing")


def _served_parser(kernels: argparse._SubParsersAction, model: dict) -> None:
    from kdakit.kernels.tools import served as served_module

    served = _command(kernels, "served")
    stack_defaults = served_module.StackConfig()
    served.add_argument("--heads", type=int, default=model["heads"], help="local KDA heads")
    served.add_argument("--layer-cases", default=",".join(served_module.LAYER_CASES), help="BATCHxTOKENS,...")
    served.add_argument("--stack-cases", default=",".join(served_module.STACK_CASES), help="BATCHxTOKENS,...")
    served.add_argument("--layers", type=int, default=stack_defaults.layers, help="KDA layers in the stack")
    served.add_argument("--hidden", type=int, default=stack_defaults.hidden, help="stand-in hidden size")
    served.add_argument("--ffn", type=int, default=stack_defaults.ffn, help="stand-in MoE up/down width")
    served.add_argument("--reps", type=int, default=stack_defaults.reps, help="timed stack prefills")
    served.add_argument(
        "--max-seqs", type=int, default=stack_defaults.max_seqs,
        help="SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS: sequence slots of the graph's tables (more: eager)",
    )  # fmt: skip
    served.add_argument("--arms", default=None, help="a subset of the arms (default: all)")
    served.add_argument(
        "--profile-calls", type=int, default=0,
        help="per-layer rows also list the layer's GPU kernels over N more calls (torch profiler; 0: off)",
    )  # fmt: skip
    _results_arguments(served, "served")


def _profile_parser(kernels: argparse._SubParsersAction) -> None:
    from kdakit.kernels.tools import profile as profile_module

    prof = _command(kernels, "profile")
    prof.add_argument("--cases", default=profile_module.DEFAULT_CASES, help="BATCHxTOKENS:HEADS,...")
    prof.add_argument("--calls", type=int, default=20, help="profiled calls per arm and case")
    prof.add_argument("--arms", default=None, help="a subset of the prefill arms (default: all)")
    _results_arguments(prof, "profile")


def _sweep_parser(kernels: argparse._SubParsersAction) -> None:
    from kdakit.kernels import shapes
    from kdakit.kernels.tools import sweep as sweep_module

    sweep = _command(kernels, "sweep")
    sweep_defaults = sweep_module.SweepConfig()
    sweep.add_argument("--arms", default=",".join(sweep_module.ARMS), help="Helion arms to sweep")
    sweep.add_argument("--lengths", default=shapes.csv("sweep", "lengths"), help="tokens per sequence")
    sweep.add_argument("--heads", default=shapes.csv("sweep", "heads"), help="head counts")
    sweep.add_argument("--layouts", default=shapes.csv("sweep", "layouts"), help="fixed and/or varlen")
    sweep.add_argument("--precisions", default=shapes.csv("sweep", "precisions"), help="state pool dtypes")
    sweep.add_argument("--head-dim", type=int, default=sweep_defaults.head_dim, help="K = V")
    sweep.add_argument("--timeout-s", type=float, default=300.0, help="bound on the whole sweep's workers")
    sweep.add_argument(
        "--workers", type=int, default=0, help="fresh processes per arm, each T = 1 first (0: by the cores)"
    )
    _results_arguments(sweep, "sweep")
    sweep.add_argument("--dry-run", action="store_true", help="print the cases and worker command only")


def _seeds_parser(kernels: argparse._SubParsersAction) -> None:
    seeds = _command(kernels, "seeds")
    seeds.add_argument("--budget-s", type=float, default=420.0, help="bound on the whole call")
    _results_arguments(seeds, "seeds")
    seeds.add_argument("--dry-run", action="store_true", help="print the plan only")


def _simple_parsers(kernels: argparse._SubParsersAction) -> None:
    """The subcommands of a few plain arguments (_SIMPLE_COMMANDS), their defaults not shown."""
    for name, (func, help_text, options) in _SIMPLE_COMMANDS.items():
        command = kernels.add_parser(name, help=help_text)
        for option, option_help in options.items():
            if option in _SWITCHES:
                command.add_argument(option, action="store_true", help=option_help)
            else:
                nargs = option[-1] if option[-1] in "?*" else None
                command.add_argument(option.rstrip("?*"), nargs=nargs, help=option_help)
        command.set_defaults(func=func)


def _positive(value: int, name: str, minimum: int = 1) -> int:
    if value < minimum:
        raise UsageError(f"--{name} must be >= {minimum} (got {value})")
    return value


def config_from_args(args: argparse.Namespace):
    from kdakit.kernels import shapes
    from kdakit.kernels.tools import bench

    return bench.BenchConfig(
        phases=bench.parse_phases(args.phases),
        decode_batches=bench.parse_int_list(args.decode_batches, "decode-batches"),
        verify_batches=bench.parse_int_list(args.verify_batches, "verify-batches"),
        verify_layer_requests=bench.parse_int_list(args.verify_layer_requests, "verify-layer-requests"),
        draft_tokens=_positive(args.draft_tokens, "draft-tokens"),
        prefill_shapes=bench.parse_prefill_shapes(args.prefill_shapes),
        heads=_positive(args.heads, "heads"),
        value_heads=_positive(args.heads, "heads"),
        head_dim=_positive(args.head_dim, "head-dim"),
        lower_bound=args.lower_bound,
        replays=_positive(args.replays, "replays", shapes.get("bench", "min_replays")),
        repeats=_positive(args.repeats, "repeats"),
        seed=args.seed,
        kdakit_configs=getattr(args, "configs", "shipped"),
    )


def cmd_autotune(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import autotune

    return autotune.run(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from kdakit.kernels import tuned
    from kdakit.kernels.tools import bench, bench_record, table

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
    raw, record = bench_record.write_outputs(result, out_dir, run_id)
    print(table.render_table(result))
    print(tuned.describe_active(args.configs))
    print(f"\nwrote {raw}" + (f" and {record}" if record else ""))
    return 1 if bench_record.any_failure(result) else 0


def cmd_record(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import bench_record, table

    raw = Path(args.raw)
    try:
        result = json.loads(raw.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{raw}: not a readable kernels-bench JSON ({exc})") from None
    if result.get("kind") != "kdakit.kernels-bench":
        raise UsageError(f"{raw}: not a kernels-bench JSON (kind {result.get('kind')!r})")
    run_id = args.run_id or raw.resolve().parent.parent.name
    print(table.render_table(result))
    print(f"\nwrote {bench_record.write_record(result, raw.parent, run_id)}")
    return 1 if bench_record.any_failure(result) else 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import upstream

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


def cmd_bench_table(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import bench_table

    raws = [Path(raw) for raw in args.raw] or bench_table.current_raws()
    section = bench_table.section(raws)
    named = ", ".join(map(str, raws))
    if args.write:
        bench_table.write(section)
        print(f"wrote the tables of {named} into {bench_table.BENCH_MD}")
        return 0
    if args.check:
        same = bench_table.current() == section
        print(f"{bench_table.BENCH_MD}: " + ("up to date" if same else f"differs from the tables of {named}"))
        return 0 if same else 1
    print(section)
    return 0


def cmd_served(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import served

    _positive(args.profile_calls, "profile-calls", minimum=0)

    run_id = args.run_id or datetime.now(UTC).strftime("served-%Y%m%d-%H%M%S")
    out_dir = Path(args.results_dir) / run_id / socket.gethostname()
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / served.RAW_NAME

    def save(record: dict) -> None:
        tmp = raw.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(raw)

    record = served.run(args, save=save)
    print(served.render_table(record))
    print(f"\nwrote {raw}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import profile

    cases = profile.parse_cases(args.cases)
    if args.calls < 1:
        raise UsageError(f"--calls: at least 1, got {args.calls}")
    run_id = args.run_id or datetime.now(UTC).strftime("profile-%Y%m%d-%H%M%S")
    out_dir = Path(args.results_dir) / run_id / socket.gethostname()
    out_dir.mkdir(parents=True, exist_ok=True)
    arms = profile.parse_arms(args.arms)
    profile.run(cases, out_dir / profile.RAW_NAME, calls=args.calls, arms=arms)
    print(f"\nwrote {out_dir / profile.RAW_NAME}")
    return 0


def sweep_config_from_args(args: argparse.Namespace):
    from kdakit.kernels.tools import bench, sweep

    layouts = tuple(x.strip() for x in args.layouts.split(",") if x.strip())
    precisions = tuple(x.strip() for x in args.precisions.split(",") if x.strip())
    if not layouts or set(layouts) - {"fixed", "varlen"}:
        raise UsageError(f"--layouts: expected fixed and/or varlen, got {args.layouts!r}")
    known = ("bfloat16", "float16", "float32")  # state pool dtypes SGLang offers (--mamba-ssm-dtype)
    if not precisions or set(precisions) - set(known):
        raise UsageError(
            f"--precisions: expected state dtypes among {', '.join(sorted(known))}, got {args.precisions!r}"
        )
    return sweep.SweepConfig(
        lengths=bench.parse_int_list(args.lengths, "lengths"),
        heads=bench.parse_int_list(args.heads, "heads"),
        layouts=layouts,
        precisions=precisions,
        head_dim=_positive(args.head_dim, "head-dim"),
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import sweep

    cfg = sweep_config_from_args(args)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in sweep.ARMS]
    if unknown or not arms:
        raise UsageError(f"--arms: expected a subset of {','.join(sweep.ARMS)}, got {args.arms!r}")
    run_id = args.run_id or datetime.now(UTC).strftime("sweep-%Y%m%d-%H%M%S")
    out_dir = Path(args.results_dir) / run_id / socket.gethostname()
    planned = sweep.cases(cfg)
    if args.workers < 0:
        raise UsageError(f"--workers: 0 (automatic) or more, got {args.workers}")
    workers = args.workers or sweep.default_workers(len(arms))
    if args.dry_run:
        probes = sum(1 for c in planned if c.length == 1)
        print(
            f"{len(planned) - probes} sweep cases and {probes} T = 1 probes per arm, "
            f"first {planned[0].key()}, last {planned[-1].key()}; "
            f"arms {', '.join(arms)}, each in {len(sweep.shards(planned, workers))} fresh process(es) of "
            f"{sys.executable}; "
            f"rows to {out_dir / sweep.ROWS_NAME}"
        )
        return 0
    result = sweep.run(
        arms,
        cfg,
        out_dir,
        args.timeout_s,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        workers=workers,
    )
    print(sweep.render(result))
    print(f"\nwrote {out_dir / sweep.ROWS_NAME} and {out_dir / sweep.RESULT_NAME}")
    return 1 if sweep.any_failure(result) else 0


def cmd_seeds(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import seeds

    if args.budget_s < 120:
        raise UsageError(
            f"--budget-s: at least 120 s (compilation alone takes a minute), got {args.budget_s:g}"
        )
    run_id = args.run_id or datetime.now(UTC).strftime("seeds-%Y%m%d-%H%M%S")
    log = print if args.dry_run else (lambda m: print(m, file=sys.stderr, flush=True))
    return seeds.run(Path(args.results_dir), run_id, args.budget_s, dry_run=args.dry_run, log=log)


def cmd_served_table(args: argparse.Namespace) -> int:
    from kdakit.kernels.tools import bench_table, served

    raw = Path(args.raw) if args.raw else served.latest_raw()
    section = served.section(raw)
    markers = (served.BEGIN, served.END)
    if args.write:
        bench_table.write(section, markers=markers)
        print(f"wrote the served-prefill table of {raw} into {bench_table.BENCH_MD}")
        return 0
    if args.check:
        same = bench_table.current(markers=markers) == section
        print(f"{bench_table.BENCH_MD}: " + ("up to date" if same else f"differs from the table of {raw}"))
        return 0 if same else 1
    print(section)
    return 0


# name -> (handler, help, description) of the subcommands with options of their own (see _*_parser).
_COMMANDS = {
    "bench": (
        cmd_bench,
        "time SGLang's Triton and Helion KDA kernels and kdakit's on one GPU (the PR's table)",
        "Decode, verify and prefill on one GPU: CUDA-graph per-call medians, L2-cold slot "
        "rotation, arms interleaved in rotated rounds, outputs checked against SGLang's Triton, HBM floor "
        "from the measured copy bandwidth. "
        "Writes RESULTS_DIR/RUN_ID/HOST/kernels-bench.json and its kdakit.result.v1 record.",
    ),
    "autotune": (
        cmd_autotune,
        "tune kdakit's Helion KDA kernels for this GPU's SKU and write config files (GPU only)",
        "Helion's autotuner per kernel and shape bucket, then the candidates timed with the "
        "bench's CUDA-graph timer; the faster config is written to OUT/SKU/KERNEL-BUCKET.json.",
    ),
    "served": (
        cmd_served,
        "the prefill as SGLang serves it, per arm: one KDA layer and a layer stack through SGLang's "
        "breakable prefill CUDA graph, and eager (GPU only)",
        "Per arm, through SGLang's own KDA backend and breakable prefill CUDA graph protocol: "
        "per-layer extend in the graph as served and eager (with host time), a stack of KDA layers with "
        "stand-in GPU work per layer, and the estimated prefill time of the PR's inputs. Writes "
        "RESULTS_DIR/RUN_ID/HOST/served-prefill.json.",
    ),
    "profile": (
        cmd_profile,
        "per-kernel device time of every prefill arm (torch profiler; GPU only)",
        "Each prefill arm called as SGLang's adapters call it, then `--calls` calls profiled: "
        "every CUDA kernel's µs per call and the arm's total without the input restore. Writes "
        "RESULTS_DIR/RUN_ID/HOST/prefill-profile.json after every row.",
    ),
    "sweep": (
        cmd_sweep,
        "the small-token prefill PR's sweep: every Helion prefill against SGLang's Triton, 216 cases "
        "(GPU only)",
        "Lengths x heads x fixed/varlen x state precision (kernels/shapes.toml [sweep]), gate "
        "and beta padded past the tokens, each arm in a fresh process whose first prefill is T = 1, and the "
        "arm's decode refusing a non-power-of-two head dim. Appends RESULTS_DIR/RUN_ID/HOST/sweep.jsonl per "
        "case, then writes sweep.json.",
    ),
    "seeds": (
        cmd_seeds,
        "the seed PRs' kernel measurements in one bounded GPU call: the per-layer verify table and the "
        "prefill sweep",
        "`kernels bench --phases verify-layer` in a child process, then `kernels sweep` for "
        "every Helion arm, within --budget-s; writes RESULTS_DIR/RUN_ID/HOST/ and prints both tables last.",
    ),
}

_SWITCHES = {"--force", "--write", "--check", "--resolve"}  # options that take no value
# name -> (handler, help, {option: its help}) of the subcommands whose options are switches and paths.
_SIMPLE_COMMANDS = {
    "fetch-upstream": (
        cmd_fetch,
        "extract SGLang's KDA kernel modules from the pinned wheel (pip download if needed), for "
        "`kernels bench --upstream extracted` where SGLang is not installed",
        {"--dest": "default: $KDAKIT_UPSTREAM_DIR or ~/.cache/kdakit/",
         "--force": "extract again even if present",
         "--wheel": "a local sglang wheel (else found or downloaded)"},
    ),
    "record": (
        cmd_record,
        "print the table of a bench's raw JSON and write its kdakit.result.v1 record beside it (for a bench "
        "run on a host without jsonschema)",
        {"raw": "a kernels-bench.json written by `kdakit kernels bench`",
         "--run-id": "default: the folder above the host folder"},
    ),
    "bench-table": (
        cmd_bench_table,
        "print (or --write into kernels/BENCH.md) the current tables from the newest record of each phase "
        "and head count under measurements/kernels-bench/ (or the RAWs)",
        {"raw*": "kernels-bench.json files (default: the newest of each phase and head count)",
         "--write": "replace the section in kernels/BENCH.md",
         "--check": "exit 1 when kernels/BENCH.md's section differs"},
    ),
    "served-table": (
        cmd_served_table,
        "print (or --write into kernels/BENCH.md) the served-prefill table from the newest record under "
        "measurements/served-prefill/ (or RAW)",
        {"raw?": "a served-prefill.json (default: the newest)",
         "--write": "replace the section in kernels/BENCH.md",
         "--check": "exit 1 when kernels/BENCH.md's section differs"},
    ),
    "patch": (
        cmd_patch,
        "apply (or --check) the patch that makes SGLang's Helion KDA backend call kdakit's kernels "
        "(KDAKIT_HELION_KERNELS=kdakit|upstream chooses at start-up)",
        {"--site-packages": "default: where sglang is installed",
         "--check": "only report: applies, applied or conflict",
         "--resolve": "print which modules SGLang's entry points use"},
    ),
}  # fmt: skip

"""`kdakit run ...`: what the make targets call. `kdakit run ab` owns an A/B from its run id to its report;
`kdakit run step` is one step of it (deploy-<sku>, eval-gsm8k, bench, collect, teardown); `kdakit run
preflight` the hosts' table. SCHEDULER=slurm runs the A/B as one Slurm allocation (kdakit.slurm)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from kdakit.facts import profiles
from kdakit.facts.errors import UsageError
from kdakit.records import controller_files, paths
from kdakit.records.paths import RunContext
from kdakit.run import facts, loop
from kdakit.run.ansible import PLAYBOOKS, Ansible

STEPS = ("deploy", "eval-gsm8k", "bench", "collect", "teardown")


def _ansible(args, bench_protocol: str = "", gsm8k_protocol: str = "") -> Ansible:
    return Ansible(
        inventory=args.inventory, ansible_playbook=args.ansible_playbook, extra=shlex.split(args.extra),
        dry_run=args.dry_run, bench_protocol=bench_protocol or args.protocol or "",
        gsm8k_protocol=gsm8k_protocol, hosts=getattr(args, "hosts", "") or "",
        purge=getattr(args, "purge", False),
    )  # fmt: skip


def preflight(args, sku: str, *flags: str) -> int:
    """kdakit/checks/preflight.py's table of the SKU's hosts, with the controller's facts."""
    from kdakit.checks import preflight as checks

    values = facts.extra_vars(args.results, "preflight", "preflight")
    facts_file = facts.write(values)
    try:
        ansible_inventory = str(Path(args.ansible_playbook).parent / "ansible-inventory")
        argv = ["--sku", sku, "--inventory", args.inventory, "--playbook", str(PLAYBOOKS / "preflight.yml"),
                "--ansible-playbook", args.ansible_playbook, "--ansible-inventory", ansible_inventory,
                "--docker", args.docker, f"--extra=-e @{facts_file} {args.extra}",
                "--results", args.results, *flags]  # fmt: skip
        return checks.cluster_main(argv)
    finally:
        facts_file.unlink(missing_ok=True)


def _report(run_dir: Path) -> int:
    return subprocess.run([sys.executable, "-m", "kdakit", "report", str(run_dir)], check=False).returncode


def _latest(results: str, run_id: str) -> None:
    try:
        controller_files.write_latest(results, run_id)
    except OSError as exc:  # WriteFailed: which file, how much is free and where
        raise UsageError(str(exc)) from None


def _slurm_backend(args, run: RunContext, gsm8k_protocol: str = ""):
    from kdakit.slurm import allocation, jobs, timing
    from kdakit.slurm import run as slurm_run
    from kdakit.slurm import settings as slurm_settings

    loaded = slurm_settings.load(args.slurm_settings or None, args.slurm_set)
    if gsm8k_protocol:  # a published A/B's (or the command line's) GSM8K protocol over the site's default
        loaded.gsm8k_protocol = gsm8k_protocol
    timing.check_nodes(loaded)  # before anything is written
    ctx = slurm_run.Context(
        settings=loaded, slurm=jobs.Slurm(),
        results=Path(args.results).resolve(), run_id=run.run_id, sku=run.sku, dry_run=args.dry_run,
    )  # fmt: skip
    return allocation.SlurmAllocation(ctx)


def _ab(args) -> int:
    sku = args.sku
    profiles.sku(sku)
    arms = args.arms.split() if args.arms else list(profiles.ab_arms())
    unknown = [a for a in arms if a not in profiles.arms()]
    if unknown:
        raise UsageError(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(profiles.arms())}")
    run_id = paths.resolve_run_id(args.results, args.run_id, new=True)
    # a published A/B's protocols (arms.toml's published_ab, e.g. triton against cutedsl) unless given
    published = profiles.ab_protocols(arms) or {}
    bench_protocol = args.protocol or published.get("bench") or ""  # empty: the roles' defaults (pr)
    gsm8k_protocol = args.gsm8k_protocol or published.get("gsm8k") or ""
    run = RunContext(Path(args.results).resolve(), run_id, sku=sku)
    if args.scheduler == "slurm":
        backend = _slurm_backend(args, run, gsm8k_protocol)
        plan = loop.plan_of(bench_protocol or "pr", backend.ctx.settings.bench_protocols)
    else:
        plan = loop.plan_of(bench_protocol or "pr")
        if not args.preflight_done:
            rc = preflight(args, sku, "--gate", "--arms", str(len(arms)), *arm_flags(arms))
            if rc != 0:
                return rc
        backend = _ansible(args, bench_protocol, gsm8k_protocol)
    try:
        return loop.run_ab(run, arms, plan, backend, dry_run=args.dry_run, report=_report)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(f"interrupted: run {run_id} stopped; its results so far are in {run.run_dir}", file=sys.stderr)
        return 130


def arm_flags(arms) -> list[str]:
    """Preflight's --arm per arm: it refuses an arm whose kernels cannot run on the SKU's GPU."""
    return [flag for arm in arms for flag in ("--arm", arm)]


def default_hosts() -> str:
    """The hosts of a later step: every SKU group of the registry."""
    return ":".join(profiles.skus())


def _step(args) -> int:
    if args.print_hosts:
        print(args.hosts or default_hosts())
        return 0
    new = args.step == "deploy"
    if args.step == "teardown" and not args.run_id and paths.read_latest(args.results) is None:
        run_id = "none"  # nothing was ever deployed from here: teardown still removes the kit's containers
    else:
        run_id = paths.resolve_run_id(args.results, args.run_id, new=new)
    sku = args.sku
    if new:
        profiles.sku(sku)
        rc = preflight(args, sku, "--hosts-only", *arm_flags([args.arm]))
        if rc != 0:
            return rc
        if not args.dry_run:
            _latest(args.results, run_id)
    run = RunContext(Path(args.results).resolve(), run_id, sku=sku if new else "", arm=args.arm)
    backend = _ansible(args)
    if not new:
        backend.hosts = args.hosts or default_hosts()
    try:
        ok, _ = backend.step(run, args.step)
    except KeyboardInterrupt:
        return 130
    return 0 if ok else 1


def _preflight(args) -> int:
    profiles.sku(args.sku)
    flags = (["--build"] if args.build else []) + (["--gate", "--arms", str(args.arms)] if args.gate else [])
    arms = args.arm or (list(profiles.ab_arms()) if args.gate else [])
    return preflight(args, args.sku, *flags, *arm_flags(arms))


def register(sub) -> None:
    p = sub.add_parser("run", help="a run on the cluster: the A/B, one step, the preflight (what make calls)")
    actions = p.add_subparsers(dest="run_command", required=True, metavar="ACTION")

    def common(name: str, fn, help_: str):
        q = actions.add_parser(name, help=help_)
        q.add_argument("--sku", default=profiles.default_sku(), help="a SKU of the registry (kdakit skus)")
        q.add_argument("--results", default="results")
        q.add_argument("--run-id", default="", help="default: new for deploy and ab, else results/LATEST")
        q.add_argument("--inventory", default="playbooks/inventories/localhost.yml")
        q.add_argument("--ansible-playbook", default=str(Path(sys.executable).parent / "ansible-playbook"))
        q.add_argument("--docker", default="docker", help="the controller's docker client (preflight)")
        q.add_argument("--extra", default="", help="more ansible-playbook arguments (make's EXTRA)")
        q.add_argument("--protocol", default="", help="the serving protocol (kdakit/facts/protocols.toml)")
        q.add_argument(
            "--dry-run", action="store_true", help="check mode with diff; Slurm: print the scripts"
        )
        q.set_defaults(func=fn)
        return q

    q = common("ab", _ab, "the A/B on the SKU's hosts: every visit of every arm, roll-up, report")
    q.add_argument("--arms", default="", help="the arms in order (default: arms.toml's ab)")
    q.add_argument(
        "--gsm8k-protocol", default="", help="GSM8K's protocol (default: a published A/B's, else the role's)"
    )
    q.add_argument("--scheduler", choices=("ansible", "slurm"), default="ansible")
    q.add_argument("--preflight-done", action="store_true", help="skip the preflight gate (reproduce ran it)")
    q.add_argument("--slurm-settings", default="", help="the site's Slurm settings (slurm/site.example.toml)")
    q.add_argument("--slurm-set", action="append", default=[], metavar="KEY=VALUE")
    q = common("step", _step, "one step on the hosts (deploy: the SKU's; the others: every deployed host)")
    q.add_argument("step", choices=STEPS)
    q.add_argument("--arm", default="helion")
    q.add_argument("--hosts", default="", help="inventory groups or hosts, colon-separated (not for deploy)")
    q.add_argument("--print-hosts", action="store_true", help="print the hosts the step would run on")
    q.add_argument("--purge", action="store_true", help="teardown: the staged image tarballs too")
    q = common("preflight", _preflight, "one table of every host's checks")
    q.add_argument("--build", action="store_true", help="check the controller's image builder too")
    q.add_argument("--gate", action="store_true", help="fail only when nothing could run")
    q.add_argument("--arms", type=int, default=1, help="arm visits the run measures (disk check)")
    q.add_argument(
        "--arm", action="append", default=[], help="an arm it serves (repeatable; --gate: the A/B's arms)"
    )

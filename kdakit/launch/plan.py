"""`kdakit plan`: the exact `sglang serve` command and container environment for a SKU and arm.

Every flag and value is checked against SGLang's own argument definitions (kdakit.launch.sglang_args) before
anything reaches a cluster.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from kdakit.facts import kernel_contracts, profiles
from kdakit.facts.errors import UsageError
from kdakit.launch import sglang_args

SERVE_COMMAND = ("sglang", "serve")
_FALSE = {"false", "0", "no", "off"}
_TRUE = {"true", "1", "yes", "on"}


@dataclass
class Plan:
    sku: str
    arm: str
    argv: list[str]
    env: dict[str, str]

    def flags(self) -> dict[str, object]:
        """The sglang flags of argv: {flag: value, or True for a switch}."""
        found, args, i = {}, self.argv[len(SERVE_COMMAND) :], 0
        while i < len(args):
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                found[args[i]] = args[i + 1]
                i += 2
            else:
                found[args[i]] = True
                i += 1
        return found

    def as_dict(self) -> dict:
        return {"sku": self.sku, "arm": self.arm, "argv": self.argv, "env": self.env}

    def text(self) -> str:
        env = "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        lines, i = [shlex.join(self.argv[:2])], 2
        while i < len(self.argv):
            if i + 1 < len(self.argv) and not self.argv[i + 1].startswith("--"):
                lines.append(f"  {self.argv[i]} {shlex.quote(self.argv[i + 1])}")
                i += 2
            else:
                lines.append(f"  {self.argv[i]}")
                i += 1
        return f"# container environment\n{env}\n# command\n" + " \\\n".join(lines)


def parse_setting(text: str) -> tuple[str, str | None]:
    """'--flag=value', 'flag=value' or '--flag' -> ('--flag', value or None)."""
    flag, sep, value = text.partition("=")
    flag = flag.strip()
    if not flag:
        raise UsageError(f"--set {text!r}: expected FLAG=VALUE")
    if not flag.startswith("--"):
        flag = "--" + flag
    return flag, (value if sep else None)


def render(
    sku: str,
    arm: str,
    settings: list[str] = (),
    unset: list[str] = (),
    model_path: str | None = None,
    host: str | None = None,
    port: int | None = None,
    env_overrides: list[str] = (),
) -> Plan:
    profile = profiles.load(sku, arm)
    spec = sglang_args.spec()
    deploy = {
        **profile.deploy,
        **{k: v for k, v in (("model_path", model_path), ("host", host), ("port", port)) if v is not None},
    }
    flags: dict[str, object] = {
        "--model-path": deploy["model_path"],
        **profile.flags,
        "--host": deploy["host"],
        "--port": deploy["port"],
    }

    # Key flags by SGLang's primary spelling so that an alias (--model, --tp) overrides, never duplicates.
    by_name: dict[str, object] = {}
    for flag, value in flags.items():
        by_name[spec.lookup(flag).name] = value
    for text in settings:
        flag, value = parse_setting(text)
        opt = spec.lookup(flag)
        if opt.is_flag and value is not None:
            if value.lower() not in _TRUE | _FALSE:
                raise UsageError(f"{flag} is a switch; use {flag}=true or {flag}=false")
            value = value.lower() in _TRUE
        elif opt.is_flag:
            value = True
        by_name[opt.name] = value
    for flag in unset:
        by_name.pop(spec.lookup(parse_setting(flag)[0]).name, None)
    refused = kernel_contracts.refusal(
        arm, by_name, profile.model_facts, profile.gpu_capability, f"{sku} ({profile.gpu_model})"
    )
    if refused:
        raise UsageError(refused)

    argv = list(SERVE_COMMAND)
    for name, value in by_name.items():
        opt = spec.lookup(name)
        if opt.is_flag:
            if value is True:
                argv.append(name)
            elif value is not False:
                raise UsageError(f"{name} is a switch in sglang; the profile gives it {value!r}")
            continue
        text = None if value is None else str(value)
        spec.check_value(name, text)
        argv += [name, text]

    env = dict(profile.env)
    for item in env_overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        env[key] = value
    return Plan(sku=sku, arm=arm, argv=argv, env=env)


def add_plan_arguments(p) -> None:
    p.add_argument("--sku", required=True, help="launch profile: " + ", ".join(profiles.skus()))
    p.add_argument("--arm", required=True, help="kernel arm: " + ", ".join(profiles.arms()))
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="override or add an sglang flag (repeatable); a switch takes no value or =true/false",
    )
    p.add_argument("--unset", action="append", default=[], metavar="FLAG", help="drop a flag of the profile")
    p.add_argument(
        "--env",
        dest="env_overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add or override a container environment variable",
    )
    p.add_argument("--model-path", help="model directory inside the container")
    p.add_argument("--host", help="address the server listens on")
    p.add_argument("--port", type=int, help="server port")


def plan_from_args(args) -> Plan:
    return render(
        args.sku,
        args.arm,
        args.settings,
        args.unset,
        args.model_path,
        args.host,
        args.port,
        args.env_overrides,
    )


def _run(args) -> int:
    plan = plan_from_args(args)
    print(json.dumps(plan.as_dict(), indent=2) if args.format == "json" else plan.text())
    return 0


def register(sub) -> None:
    p = sub.add_parser("plan", help="print the exact sglang command and container environment")
    add_plan_arguments(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_run)

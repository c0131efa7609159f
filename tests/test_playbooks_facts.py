"""Each deployment fact once: the server port is the launch profile's [deploy] port, which `kdakit plan`
prints and the playbooks serve on (a copy of the number anywhere in the kit's code or playbooks fails); facts
every SKU shares live in group_vars/all.yml, the per-SKU files hold only what differs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from kdakit.launch import plan

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = REPO / "playbooks"
PROFILE = REPO / "kdakit" / "facts" / "profiles" / "glm-5.3-flash.toml"
BIN = Path(sys.executable).parent
# Where the port could be copied: the kit's code and data, the playbooks and the Make targets we own.
AREAS = ("kdakit", "evals", "bench", "kernels", "images", "playbooks")
EXTENSIONS = ("py", "toml", "yml", "mk")
SCANNED = [
    *(path for area in AREAS for ext in EXTENSIONS for path in (REPO / area).rglob(f"*.{ext}")),
    REPO / "Makefile",
]


def profile_port() -> int:
    return tomllib.loads(PROFILE.read_text())["deploy"]["port"]


def test_the_port_is_written_once():
    port = str(profile_port())
    copies = []
    for path in SCANNED:
        if path == PROFILE or "data" in path.relative_to(REPO).parts[:2]:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(rf"(?<![\d.]){port}(?!\d)", line):
                copies.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not copies, "the server port is the profile's [deploy] port; copies:\n" + "\n".join(copies)


def test_plan_and_playbooks_use_the_same_port(tmp_path):
    port = profile_port()
    argv = plan.render("h200", "helion").argv
    assert argv[argv.index("--port") + 1] == str(port)
    probe = tmp_path / "probe.yml"
    probe.write_text(
        "- hosts: h200\n  gather_facts: false\n  roles: [common]\n  tasks:\n"
        "    - ansible.builtin.debug: {msg: 'PORT={{ kdakit_server_port }} URL={{ kdakit_server_url }}'}\n"
    )
    # The probe playbook runs from playbooks/ so that group_vars and roles resolve as for the real ones.
    inplace = PLAYBOOKS / f".probe-{os.getpid()}.yml"
    inplace.write_text(probe.read_text())
    try:
        proc = subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                "-i",
                str(PLAYBOOKS / "inventories" / "localhost.yml"),
                str(inplace),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, ANSIBLE_CONFIG=str(PLAYBOOKS / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
        )
    finally:
        inplace.unlink()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PORT={port} URL=http://127.0.0.1:{port}" in proc.stdout


def test_sku_group_vars_hold_only_what_differs():
    shared = yaml.safe_load((PLAYBOOKS / "group_vars" / "all.yml").read_text())
    per_sku = {p.stem: yaml.safe_load(p.read_text()) for p in (PLAYBOOKS / "group_vars").glob("*.yml")}
    per_sku.pop("all")
    assert sorted(per_sku) == ["b200", "h200"]
    for sku, facts in per_sku.items():
        assert facts["kdakit_sku"] == sku
        assert not set(facts) & set(shared), f"{sku}.yml repeats group_vars/all.yml"
    keys = [set(f) for f in per_sku.values()]
    for key in set.intersection(*keys):
        values = {repr(f[key]) for f in per_sku.values()}
        assert len(values) > 1, f"{key} is the same in every SKU file: it belongs in group_vars/all.yml"

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

import pytest
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
    # The probe playbook sits in a playbooks/ folder of links to the real one's group_vars, roles and tasks
    # (and to kdakit/ beside it, which the roles' defaults read), so that they resolve as for the real
    # playbooks; not in playbooks/ itself, where ansible-lint (another test, maybe running at the same time)
    # would find it.
    (tmp_path / "kdakit").symlink_to(PLAYBOOKS.parent / "kdakit")
    here = tmp_path / "playbooks"
    here.mkdir()
    for name in ("group_vars", "roles", "tasks"):
        (here / name).symlink_to(PLAYBOOKS / name)
    probe = here / "probe.yml"
    probe.write_text(
        "- hosts: h200\n  gather_facts: false\n  roles: [common]\n  tasks:\n"
        "    - ansible.builtin.debug: {msg: 'PORT={{ kdakit_server_port }} URL={{ kdakit_server_url }}'}\n"
    )
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(PLAYBOOKS / "inventories" / "localhost.yml"), str(probe)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, ANSIBLE_CONFIG=str(PLAYBOOKS / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PORT={port} URL=http://127.0.0.1:{port}" in proc.stdout


def fact_copies(playbooks: Path = PLAYBOOKS) -> list[str]:
    """Variables declared in more than one of group_vars/*.yml and the roles' defaults, and any group_vars
    file per SKU: each fact has one place (the site's in group_vars/all.yml, the rest in a role's defaults,
    what differs per SKU in the SKU registry)."""
    places: dict[str, list[str]] = {}
    group_vars = sorted(playbooks.glob("group_vars/*.yml"))
    for path in [*group_vars, *sorted(playbooks.glob("roles/*/defaults/main.yml"))]:
        for key in yaml.safe_load(path.read_text()) or {}:
            places.setdefault(key, []).append(str(path.relative_to(playbooks)))
    copies = [f"{key}: {', '.join(where)}" for key, where in places.items() if len(where) > 1]
    copies += [f"{p.relative_to(playbooks)}: per-SKU facts live in the SKU registry" for p in group_vars
               if p.name != "all.yml"]  # fmt: skip
    return sorted(copies)


def test_each_deployment_fact_is_declared_once():
    assert fact_copies() == []


def _copy_of_the_vars(tmp_path: Path) -> Path:
    root = tmp_path / "playbooks"
    for path in [*PLAYBOOKS.glob("group_vars/*.yml"), *PLAYBOOKS.glob("roles/*/defaults/main.yml")]:
        target = root / path.relative_to(PLAYBOOKS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return root


@pytest.mark.parametrize(
    ("file", "line"),
    [
        ("roles/common/defaults/main.yml", "kdakit_image: kdakit:latest"),
        ("roles/common/defaults/main.yml", "kdakit_model_path: /data/models/GLM-5.3-Flash"),
        ("roles/common/defaults/main.yml", "kdakit_host_results_root: /var/lib/kdakit/results"),
        ("roles/image/defaults/main.yml", "kdakit_image_tarball: out/kdakit-h200.tar.zst"),
        ("roles/server/defaults/main.yml", "kdakit_server_set: []"),
        ("roles/server/defaults/main.yml", "kdakit_hf_cache: ''"),
        ("group_vars/all.yml", "kdakit_expect_gpu_count: 4"),
        ("group_vars/all.yml", "kdakit_sku: h200"),
        ("group_vars/h200.yml", "kdakit_expect_gpu_model: H200"),
    ],
)
def test_a_fact_declared_again_is_caught(tmp_path, file, line):
    root = _copy_of_the_vars(tmp_path)
    assert fact_copies(root) == []
    path = root / file
    path.write_text((path.read_text() if path.exists() else "---\n") + line + "\n")
    assert fact_copies(root)

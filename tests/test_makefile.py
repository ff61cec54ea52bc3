"""The Makefile and the scripts it runs: the demo's targets install only its runtime, the
suite's the dev set; the scripts that install system packages for some tests say so in one line
before they change anything, and ``SKIP_SYSTEM_INSTALL=1`` skips them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def dry_run(tmp_path: Path, target: str) -> str:
    """What ``make -n <target>`` would run in a fresh clone (no ``.venv`` yet)."""
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", ["run", "run-asgi", "superuser", "token"])
def test_the_demo_s_targets_install_only_its_runtime(tmp_path, target):
    plan = dry_run(tmp_path, target)
    assert "pip install -q -r requirements.txt" in plan
    assert "requirements-dev.txt" not in plan


@pytest.mark.parametrize("target", ["test", "lint", "install"])
def test_the_suite_s_targets_install_the_dev_set(tmp_path, target):
    plan = dry_run(tmp_path, target)
    assert "pip install -q -r requirements-dev.txt" in plan


class FakeRoot:
    """A PATH on which ``id -u`` says 0 and ``apt-get`` only records that it ran (and fails),
    so a script's way to an install is seen without installing anything."""

    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "apt-get.calls"
        (self.bin / "id").write_text("#!/bin/sh\necho 0\n")
        (self.bin / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {self.calls}\nexit 1\n')
        for tool in ("id", "apt-get"):
            (self.bin / tool).chmod(0o755)

    def run(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "scripts" / script)],
            env={
                # NOTE: the suite may run under SKIP_SYSTEM_INSTALL=1; each case sets its own.
                **{k: v for k, v in os.environ.items() if k != "SKIP_SYSTEM_INSTALL"},
                "PATH": f"{self.bin}:/usr/bin:/bin",
                "TMPDIR": str(self.bin.parent),
                **env,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )


SCRIPTS = {
    "ensure-chromium": lambda: Path("/usr/bin/chromium").exists(),
    "ensure-pgbouncer": lambda: (
        bool(shutil.which("pgbouncer")) or Path("/usr/sbin/pgbouncer").exists()
    ),
    "ensure-pg-auto-failover": lambda: (
        bool(shutil.which("pg_autoctl"))
        or any(Path("/usr/lib/postgresql").glob("*/bin/pg_autoctl"))
    ),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_system_install_is_announced_in_one_line_first_and_can_be_skipped(tmp_path, script):
    if SCRIPTS[script]():
        pytest.skip(f"{script} has nothing to install here")
    root = FakeRoot(tmp_path)
    skipped = root.run(script, SKIP_SYSTEM_INSTALL="1")
    assert skipped.returncode == 0
    assert not root.calls.exists()
    (line,) = skipped.stderr.splitlines()
    assert f"{script}: SKIP_SYSTEM_INSTALL is set: not installing" in line
    tried = root.run(script)
    assert tried.returncode == 0
    assert root.calls.exists()
    first = tried.stderr.splitlines()[0]
    assert "as root with apt-get" in first and "SKIP_SYSTEM_INSTALL=1 skips this" in first

"""The set-up and the suite's own rules: what the Makefile's install keys on, where it builds, one Prefect API for a
whole command (flows/with_api.py), and the e2e mark derived from the fixtures a test uses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import E2E_FIXTURES, ROOT


def _make_vars(folder: Path, *names: str, env: dict | None = None) -> dict[str, str]:
    """The values of the Makefile's variables ``names`` in ``folder`` (``make -pn``: nothing is built)."""
    p = subprocess.run(["make", "-pn", "help"], cwd=folder, capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr[-2000:]
    found = {}
    for line in p.stdout.splitlines():
        name, sep, value = line.partition(" := ")
        if sep and name in names:
            found[name] = value
    assert set(found) == set(names), (names, found)
    return found


@pytest.fixture
def makefile_copy(tmp_path: Path) -> Path:
    """The Makefile with the files its install keys on, in a folder of its own (a clone, to the Makefile)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for f in ("Makefile", "requirements.lock", "pyproject.toml"):
        shutil.copy2(ROOT / f, clone / f)
    return clone


def test_the_install_stamp_ignores_the_makefiles_comments_and_follows_the_lock(makefile_copy):
    keys = ("STAMP", "BASE_ENV", "LLAMA_DIR")
    before = _make_vars(makefile_copy, *keys)
    with (makefile_copy / "Makefile").open("a") as f:
        f.write("\n# a comment changes nothing that is installed\n")
    assert _make_vars(makefile_copy, *keys) == before
    with (makefile_copy / "requirements.lock").open("a") as f:
        f.write("\n# another lock\n")
    after = _make_vars(makefile_copy, *keys)
    assert after["STAMP"] != before["STAMP"] and after["BASE_ENV"] != before["BASE_ENV"]
    assert after["LLAMA_DIR"] == before["LLAMA_DIR"]  # the wheel keys on its own version, hash, flags, Python


def test_the_wheel_and_the_locked_environment_live_outside_the_clone(makefile_copy, tmp_path):
    cache = tmp_path / "machine-cache"
    got = _make_vars(makefile_copy, "LLAMA_DIR", "BASE_ENV", "LLAMA_KEY", env={"KGRAG_CACHE": str(cache)})
    for k in ("LLAMA_DIR", "BASE_ENV"):
        assert got[k].startswith(str(cache) + "/"), got
        assert not got[k].startswith(str(makefile_copy) + "/")
    assert got["LLAMA_KEY"] in got["LLAMA_DIR"] and got["LLAMA_KEY"] in got["BASE_ENV"]
    # the build flags are part of the wheel's key
    flags = subprocess.run(["make", "-pn", "help", "LLAMA_CMAKE_ARGS=-DGGML_NATIVE=ON"], cwd=makefile_copy,
                           capture_output=True, text=True, timeout=120, env={**os.environ, "KGRAG_CACHE": str(cache)})
    assert flags.returncode == 0 and "LLAMA_KEY := " in flags.stdout
    assert f"LLAMA_KEY := {got['LLAMA_KEY']}\n" not in flags.stdout


def test_this_venv_is_a_copy_of_the_machines_locked_environment():
    """.venv's packages are the locked environment's files (hard links where the file system allows), its
    scripts run .venv's own Python, and kgrag is this work tree's (editable)."""
    venv = Path(sys.prefix)
    if venv != ROOT / ".venv":
        pytest.skip(f"the suite runs in {venv}, not the Makefile's .venv")
    stamp = [p.name for p in venv.glob(".installed-*")]
    assert stamp, "no install stamp: not set up by make install"
    dvc = (venv / "bin" / "dvc").read_text().splitlines()[0]
    assert dvc == f"#!{venv}/bin/python"
    import kgrag

    assert Path(kgrag.__file__).resolve().is_relative_to(ROOT)


@pytest.mark.slow  # a Prefect server on a new database (its migrations): 24 s on 2 cores
def test_with_api_gives_a_command_one_api_and_stops_it(tmp_path):
    """`python -m flows.with_api CMD`: CMD and everything it starts see one running API (no temporary server
    per process), on the project's own Prefect home; it exits with CMD's code, and the server stops with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PYTHONPATH"] = str(ROOT)
    child = ("import os, sys, urllib.request; u = os.environ['PREFECT_API_URL']; "
             "print(u); print(urllib.request.urlopen(u + '/health', timeout=30).read().decode()); sys.exit(3)")
    p = subprocess.run([sys.executable, "-m", "flows.with_api", sys.executable, "-c", child], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 3, p.stderr[-2000:]  # the command's own exit code
    url, health = p.stdout.split()[:2]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/api") and health == "true"
    assert (tmp_path / ".kgrag_cache" / "prefect_home").is_dir()  # the project's Prefect home, as every stage's
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/health", timeout=5)  # stopped with the command
    # a configured API is used as it is
    env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    p = subprocess.run([sys.executable, "-m", "flows.with_api", sys.executable, "-c",
                        "import os; print(os.environ['PREFECT_API_URL'])"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "http://127.0.0.1:9/api", p.stderr[-2000:]


def test_every_test_that_builds_a_project_is_marked_e2e(request):
    """conftest derives the e2e mark from the fixtures a test uses, so `make test-fast` (-m "not e2e") runs no
    `dvc repro`: every collected test that uses a project fixture carries the mark."""
    items = request.session.items
    assert items
    unmarked = [i.nodeid for i in items
                if E2E_FIXTURES & set(getattr(i, "fixturenames", ())) and i.get_closest_marker("e2e") is None]
    assert not unmarked, unmarked
    me = next(i for i in items if i.nodeid.endswith("test_every_test_that_builds_a_project_is_marked_e2e"))
    assert me.get_closest_marker("e2e") is None  # the mark is not put on everything


def test_every_test_on_the_metaqa_project_is_in_its_unit_of_work(request):
    """Parallel workers run E2E_PROJECT_FILES as one unit (conftest's scheduler), so the session's MetaQA project is
    built once: a test using its fixtures in another file would build it on a second worker."""
    from tests.conftest import E2E_PROJECT_FILES

    outside = sorted({i.path.name for i in request.session.items
                      if E2E_FIXTURES & set(getattr(i, "fixturenames", ())) and i.path.name not in E2E_PROJECT_FILES})
    assert not outside, f"add to tests/conftest.py E2E_PROJECT_FILES: {outside}"
    # and no file rides in that unit without reading the project (it would lengthen the longest unit for nothing)
    names = [*E2E_FIXTURES, "getfixturevalue"]
    idle = sorted(f for f in E2E_PROJECT_FILES
                  if not any(n in (Path(__file__).parent / f).read_text() for n in names))
    assert not idle, f"remove from tests/conftest.py E2E_PROJECT_FILES (no test there uses the project): {idle}"

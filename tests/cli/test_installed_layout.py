"""The CLI of an installed package reads nothing outside it: no source checkout found from the package's location.

The package is copied alone into a site folder (the layout a wheel installs) and the CLI runs from an unrelated
current folder with an audit hook that records every file it opens; no path of the source checkout may be among them
(the virtual environment's own files aside). Its data come from package data (``gradax/data``), and ``gradax
bench`` says that it needs ``--checkout``.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, os, sys
# a wheel puts no source folder on sys.path (this environment's editable install of the checkout does)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.environ["GRADAX_TEST_SRC"]]
opened = []
sys.addaudithook(lambda event, args: opened.append(os.fsdecode(args[0])) if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)) else None)
import gradax
from gradax.cli import main
codes = [
    main(["schedule", "linear_schedule(1.0, 0.0, 10)", "--steps", "10", "--out", "lr.png"]),
    main(["train", "--task", "digits", "--steps", "2", "--quiet", "--out", "run"]),
    main(["bench"]),
]
from gradax.cli._tasks import load_text
assert "Hamlet" in load_text()
print(json.dumps({"codes": codes, "package": gradax.__file__, "opened": sorted(set(os.path.abspath(p) for p in opened))}))
"""


def test_installed_cli_reads_only_its_package(tmp_path):
    site, work = tmp_path / "site", tmp_path / "work"
    shutil.copytree(ROOT / "src" / "gradax", site / "gradax", ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu", "GRADAX_TEST_SRC": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["package"].startswith(str(site))  # the copy, not the checkout's src/
    assert got["codes"] == [0, 0, 2]
    assert "--checkout must name a gradax source checkout" in proc.stderr
    environment = Path(sys.prefix).resolve()
    from_checkout = [
        p for p in got["opened"] if Path(p).is_relative_to(ROOT) and not Path(p).resolve().is_relative_to(environment)
    ]
    assert from_checkout == []
    for name in ("digits.npz", "shakespeare.txt"):  # package data, from the copy
        assert os.path.join(str(site), "gradax", "data", name) in got["opened"]
    assert (work / "run" / "summary.json").is_file() and (work / "lr.png").is_file()


def test_cli_modules_do_not_locate_files_from_their_own_path():
    """Paths come from package data (importlib.resources), the current folder or arguments, never ``__file__``."""
    cli = ROOT / "src" / "gradax" / "cli"
    assert [p.name for p in sorted(cli.glob("*.py")) if "__file__" in p.read_text()] == []

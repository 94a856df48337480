"""A stock PyTorch image, emulated: the packages it lacks made absent in a child Python process.

A GPU node often holds only torch, torchvision, timm (and its own dependencies), numpy, pyyaml, pillow and pytest;
what reads params (pydantic, ruamel.yaml) travels there as the wheels of `make device-wheels`. A training cell, the
engine, the data path, bench/'s GPU scripts and `pytest -m gpu` must start there (tests/test_stock_image.py).
`environment()` gives a subprocess a `sitecustomize` that sets `sys.modules[name] = None` for each package of ABSENT:
`import name` then raises ModuleNotFoundError and `importlib.util.find_spec(name)` returns None, exactly as where the
package is not installed (a `sys.meta_path` finder that raises would answer `find_spec` with an exception instead,
which torch's dynamo never sees on a real image: it probes optional libraries that way). Every Python process started
from that one (torchrun's ranks, DataLoader workers) inherits it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What the project's venv holds and a stock PyTorch image with the device wheels does not: DVC and dvclive, the
#: analysis and report stack, the SLURM launcher, the CPU-only helpers. (pytest-timeout too: pass PYTEST_ABSENT to
#: pytest, since pytest itself trips over a plugin module set to None.)
ABSENT = ("dvc", "dvclive", "kornia", "kornia_rs", "scipy", "threadpoolctl", "pandas", "matplotlib",
          "sklearn", "statsmodels", "submitit", "fpdf", "pypdf")
PYTEST_ABSENT = ("-p", "no:timeout")


def environment(folder: Path) -> dict:
    """os.environ for a child Python process in which ABSENT cannot be imported (its sitecustomize in `folder`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n\n"
        f"for name in {ABSENT!r}:\n"
        "    sys.modules[name] = None  # absent, as on a stock PyTorch image (tests/stock_image.py)\n")
    path = os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "PATH": f"{Path(sys.executable).parent}"
            f"{os.pathsep}{os.environ['PATH']}"}

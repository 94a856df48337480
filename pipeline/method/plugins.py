"""Your own initialisation as an arm of the grid (params `inits`, docs/own-init.md), found and imported here.

The contract, all a plug-in needs to know of the pipeline:

    def local_box(model: torch.nn.Module, generator: torch.Generator, **options) -> None:
        ...  # change model's parameters in place

- `model` is the cell's timm model (ViT/DeiT, Swin or MLP-Mixer, built with `weight_init='skip'`) on the CPU, already
  at PyTorch's default init drawn from `generator`: the `default` arm with its options at 1. Write only what your
  init changes; everything else stays the baseline's.
- It runs under `torch.no_grad()`, so in-place writes to parameters (`copy_`, `mul_`, slicing) just work.
- Draw every random number from `generator` (`torch.randn(shape, generator=generator)`): one seed is then one model,
  which is what makes a paired comparison with the other arms (same seed, same data order) fair.
- `options` are the keyword arguments params give (`inits.<arm>.options`, `models.<variant>.init_options.<arm>`).
- The return value is ignored; afterwards every parameter must be finite.

The function is named `<module>:<function>`; the module is a file of the repository (`my_inits.py`, or
`pkg/inits.py` as `pkg.inits`) found under the working directory, where DVC runs every stage, and nowhere else: its
source is part of each of its cells' configuration (`pipeline.closure.local_closure`), so a result never outlives
the code that produced it. Torch-free, and nothing of the pipeline but its errors: params validation and the init
library share it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.errors import PipelineError

#: what an arm's function is written as: '<dotted module>:<function>'
FORM = "'<module>:<function>', e.g. 'my_inits:local_box' for `def local_box(model, generator)` in my_inits.py"
CONTRACT = "fn(model, generator, **options) (docs/own-init.md)"


def parse_spec(spec: object, key: str) -> tuple[str, str]:
    """'my_inits:local_box' -> ('my_inits', 'local_box'); a PipelineError naming `key` otherwise."""
    module, sep, function = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    parts = module.split(".") if sep else []
    if not parts or not all(p.isidentifier() for p in parts) or not function.isidentifier():
        raise PipelineError(f"{key} = {spec!r}: write {FORM}")
    if parts[0] == "pipeline":
        raise PipelineError(f"{key} = {spec!r}: a plug-in lives outside the pipeline package (an init inside it is a"
                            " built-in arm: pipeline/method/inits/__init__.py's ARMS); move it to a file of its own")
    return module, function


def module_file(module: str, root: Path) -> Path | None:
    """The file `import module` loads from `root`: a package's __init__.py before a module of the same name, as
    Python's path finder orders them (`pipeline.closure` walks pipeline/ by the same rule)."""
    path = root.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _bound_names(body: list[ast.stmt]) -> tuple[set[str], bool]:
    """Names a module body binds at its top level (inside if/try/with too), and whether it has `import *`."""
    names, star = set(), False
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            star |= any(a.name == "*" for a in node.names)
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        nested = [*getattr(node, "body", []), *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                  *(s for h in getattr(node, "handlers", []) for s in h.body)]
        more, more_star = _bound_names(nested)
        names, star = names | more, star or more_star
    return names, star


def locate(spec: object, key: str, root: Path) -> Path:
    """The file of `spec`'s module under `root`, checked without running it (params load without torch or your
    code): it exists, parses, and binds the function's name at its top level."""
    module, function = parse_spec(spec, key)
    file = module_file(module, root)
    if file is None:
        where = module.replace(".", "/")
        raise PipelineError(f"{key} = {spec!r}: no {where}.py (or {where}/__init__.py) in {root}; a plug-in init is a"
                            " file of the repository, imported from its root (where dvc runs every stage): put it"
                            " there, or fix the module's name")
    shown = file.relative_to(root).as_posix()
    try:
        tree = ast.parse(file.read_text(), filename=shown)
    except SyntaxError as exc:
        raise PipelineError(f"{key} = {spec!r}: {shown} line {exc.lineno}: {exc.msg}; fix its syntax") from None
    names, star = _bound_names(tree.body)
    if function not in names and not star:
        defined = sorted(n for n in names if not n.startswith("_"))
        raise PipelineError(f"{key} = {spec!r}: {shown} defines no {function!r} at its top level (it defines"
                            f" {', '.join(defined) or 'nothing'}); name the function to call as {CONTRACT}")
    return file


def _forget(root: Path) -> None:
    """Drop from sys.modules every module a file under `root` would give (but the pipeline's and the standard
    library's), so that the import reads your files as they are now: this process may have imported other versions,
    or another working directory's files of those names."""
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top != "pipeline" and top not in sys.stdlib_module_names and module_file(name, root) is not None:
            del sys.modules[name]


def load(spec: str, key: str, root: Path | None = None) -> Callable:
    """Import `spec`'s function from its file under `root` (default: the working directory): a PipelineError naming
    `key` where the module does not import, another module of its name would be imported instead, or the name is
    not callable."""
    root = Path(root or Path.cwd()).resolve()
    file = locate(spec, key, root).resolve()
    module, function = parse_spec(spec, key)
    _forget(root)
    importlib.invalidate_caches()  # a file written since the last import in this process
    sys.path.insert(0, str(root))  # `python -m` puts the working directory first too; said once more, explicitly
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - your module's own error, whatever it is: one line, and how to see it
        raise PipelineError(f"{key} = {spec!r}: importing {module} failed: {type(exc).__name__}: {exc}; run"
                            f" `python -c 'import {module}'` in {root} for the traceback") from None
    finally:
        sys.path.remove(str(root))
    origin = Path(getattr(loaded, "__file__", "") or "").resolve()
    if origin != file:
        raise PipelineError(f"{key} = {spec!r}: `import {module}` loads {origin}, not {file}; rename your module so"
                            " that no installed one shadows it")
    fn = getattr(loaded, function, None)
    if not callable(fn):
        raise PipelineError(f"{key} = {spec!r}: {module}.{function} is {fn!r:.60}, not a function; name a function"
                            f" called as {CONTRACT}")
    return fn


def check_call(fn: Callable, options: dict, key: str) -> None:
    """That `fn(model, generator, **options)` binds: a PipelineError naming `key` otherwise."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function without a signature: the call itself will tell
        return
    try:
        signature.bind(None, None, **options)
    except TypeError as exc:
        given = "".join(f", {k}=..." for k in options)
        raise PipelineError(f"{key}: {getattr(fn, '__name__', fn)}{signature} cannot be called as fn(model,"
                            f" generator{given}): {exc}; the contract is {CONTRACT}") from None

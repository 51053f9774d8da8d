"""`python -m repro audit`: static scan of the installed DeepSpeed for the bug's class.

A finding is a `with GatheredParameters(...)` context without `modifier_rank` (or with
`modifier_rank=None`) whose body writes to parameters: `.copy_(...)`, other in-place `*_()` calls
on `.data`, `x.data += ...`, `x.data = ...`, or a call to a DeepSpeed function that does one of
those (resolved by name, transitively). Under ZeRO-3 with >= 2 ranks such writes are discarded.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from pathlib import Path

from ... import results
from ...findings import by_id
from ...fixstatus import installed_deepspeed, modifier_rank_arg

FIX, NON_PINNED = by_id("zero3-qkv-layout").patch, by_id("lora-non-pinned").patch

# Every site the scan finds in DeepSpeed 0.19.8, settled: "confirmed by run" (a run of ours shows the
# discarded write and its patch fixes it), "false positive" (the write is harmless, with why), or
# "not settled". Keyed by (file under deepspeed/, function); a site missing here is an unexplained candidate.
VERDICTS = {
    ("module_inject/containers/features/hybrid_megatron.py", "transform_for_inference"): (
        f"confirmed by run: DeepSpeed #8391, the inference layout is discarded at world size >= 2 (patch {FIX})"
    ),
    ("module_inject/containers/features/hybrid_megatron.py", "transform_for_training"): (
        f"confirmed by run: DeepSpeed #8391, the restore to the training layout is discarded too (patch {FIX})"
    ),
    ("runtime/hybrid_engine.py", "run_forward"): (
        "confirmed by run: pin_parameters false, world size >= 2: the LoRA fusion is discarded after the prompt "
        f"forward, so every decode step runs without LoRA (patch {NON_PINNED}; results/reference/family/)"
    ),
    ("runtime/hybrid_engine.py", "unfuse_lora_weight_non_pinned"): (
        "confirmed by run, the mirror of run_forward: its discarded subtraction cancels the discarded addition, "
        f"so training weights survive; fixed together with run_forward (patch {NON_PINNED})"
    ),
    ("runtime/hybrid_engine.py", "generate"): (
        "false positive (temporary by design): fuse, generate and unfuse inside one context, so the discard "
        "only drops the already-unfused copy; pinned LoRA runs keep LoRA at every step. Not settled: with "
        "inference_tp_size > 1 it fuses without unfusing (not run: needs tensor parallelism)"
    ),
    ("runtime/engine.py", "_save_moe_checkpoint"): "false positive: read-only (clone/detach inside the gather)",
    ("runtime/zero/stage3.py", "unwrap_model_for_generation"): (
        "false positive: registers and removes hooks only; writes no parameter data"
    ),
}
# Sites the series rewrites so that the discard is what it wants: (file, function) -> (a name only the released form
# uses, the verdict on the rewritten form).
REWRITTEN = {
    ("runtime/hybrid_engine.py", "run_forward"): (
        "is_lora_fused",
        f"false positive (patch {NON_PINNED}, by design): LoRA is fused into each forward's gathered copy, which "
        "the release discards; a persistent weight is put back in the forward's finally",
    ),
}
INPLACE_ON_DATA = {
    "copy_",
    "add_",
    "sub_",
    "mul_",
    "div_",
    "zero_",
    "fill_",
    "addmm_",
    "clamp_",
    "normal_",
    "uniform_",
    "masked_fill_",
    "index_copy_",
    "transpose_",
    "t_",
}


@dataclass
class Finding:
    file: str
    line: int
    function: str
    context: str
    writes: list[str]
    known: str | None


def _is_gather(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return name == "GatheredParameters"


def _modifier_missing(call: ast.Call) -> bool:
    arg = modifier_rank_arg(call)
    return arg is None or (isinstance(arg, ast.Constant) and arg.value is None)


# Helper names too generic to resolve by name alone (they would match unrelated writers).
GENERIC = {
    "forward",
    "__call__",
    "save",
    "load",
    "generate",
    "_generate",
    "step",
    "backward",
    "apply",
    "run",
    "update",
    "__init__",
}
MAX_DEFINITIONS = 3  # a helper name defined more often than this is ambiguous
PARAM_LIKE = ("param", "weight", "bias", "qkv")


def _has_data(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "data" for n in ast.walk(node))


def _param_like(node: ast.AST) -> bool:
    """`x.data`, or a name that reads as a parameter (`param`, `self.qkvw`, `weight`, ...)."""
    text = ast.unparse(node).lower()
    return _has_data(node) or any(word in text for word in PARAM_LIKE)


def _direct_writes(body: list[ast.stmt]) -> list[str]:
    writes = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in INPLACE_ON_DATA and _param_like(node.func.value):
                writes.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
        elif isinstance(node, ast.AugAssign) and _has_data(node.target):
            writes.append(f"line {node.lineno}: {ast.unparse(node.target)} {type(node.op).__name__}=")
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "data" for t in node.targets
        ):
            writes.append(f"line {node.lineno}: {ast.unparse(node.targets[0])} = ...")
    return writes


def _called_names(body: list[ast.stmt]) -> list[tuple[int, str]]:
    calls = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name and name not in GENERIC:
                calls.append((node.lineno, name))
    return calls


def _functions(trees: dict[str, ast.Module]) -> dict[str, list[tuple[str, ast.FunctionDef]]]:
    by_name: dict[str, list[tuple[str, ast.FunctionDef]]] = {}
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                by_name.setdefault(node.name, []).append((rel, node))
    return by_name


def _writer_names(functions: dict[str, list[tuple[str, ast.FunctionDef]]]) -> dict[str, str]:
    """Function name -> where it writes, for every function that writes directly or via another."""
    writers = {
        name: f"{rel}:{fn.lineno}" for name, defs in functions.items() for rel, fn in defs if _direct_writes(fn.body)
    }
    # Each body's callees, walked once: the fixed point below revisits them on every round.
    callees = {
        id(fn): {callee for _, callee in _called_names(fn.body)}
        for defs in functions.values()
        if len(defs) <= MAX_DEFINITIONS
        for _, fn in defs
    }
    changed = True
    while changed:
        changed = False
        for name, defs in functions.items():
            if name in writers:
                continue
            for rel, fn in defs if len(defs) <= MAX_DEFINITIONS else []:
                if any(callee in writers for callee in callees[id(fn)]):
                    writers[name] = f"{rel}:{fn.lineno}"
                    changed = True
                    break
    return writers


def _own_nodes(fn: ast.AST):
    """The nodes of `fn` outside its nested functions: each `with` belongs to its innermost function only
    (nested defs are scanned on their own), and each node is visited once."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            stack.extend(ast.iter_child_nodes(node))


def _verdict(rel: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    released_name, rewritten = REWRITTEN.get((rel, fn.name), (None, None))
    if released_name is not None and released_name not in ast.unparse(fn):
        return rewritten
    return VERDICTS.get((rel, fn.name))


def scan(package_dir: Path) -> list[Finding]:
    trees = {}
    for path in sorted(package_dir.rglob("*.py")):
        try:
            trees[path.relative_to(package_dir).as_posix()] = ast.parse(path.read_text(), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
    functions = _functions(trees)
    writers = _writer_names(functions)
    findings = []
    for rel, fn in (d for defs in functions.values() for d in defs):
        for node in (n for n in _own_nodes(fn) if isinstance(n, ast.With | ast.AsyncWith)):
            gathers = [i.context_expr for i in node.items if _is_gather(i.context_expr)]
            if not gathers or not all(_modifier_missing(g) for g in gathers):
                continue
            writes = _direct_writes(node.body)
            writes += [
                f"line {line}: calls {name}() which writes ({writers[name]})"
                for line, name in _called_names(node.body)
                if name in writers
            ]
            if writes:
                findings.append(
                    Finding(
                        f"deepspeed/{rel}", node.lineno, fn.name, ast.unparse(gathers[0]), writes,
                        _verdict(rel, fn),
                    )
                )  # fmt: skip
    return sorted(findings, key=lambda f: (f.file, f.line))


def render_text(findings: list[Finding], version: str) -> str:
    lines = [
        f"DeepSpeed {version}: {len(findings)} GatheredParameters context(s) without modifier_rank "
        "that write to parameters"
    ]
    for f in findings:
        lines.append(f"{f.file}:{f.line}  {f.function}()  {f.context}" + (f"  [{f.known}]" if f.known else ""))
        lines.extend(f"    {w}" for w in f.writes)
    return "\n".join(lines)


def main(json_path: Path | None = None) -> int:
    package_dir, version = installed_deepspeed()
    findings = scan(package_dir)
    print(render_text(findings, version))
    if json_path is not None:
        results.write(json_path, {"deepspeed": version, "findings": [asdict(f) for f in findings]})
    return 0

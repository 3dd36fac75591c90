"""The CLI's expression parser under a fuzzer (issue 23): grammar-based expressions (calls of gradax functions with
literal, nested and keyword arguments) and mutated ones (characters inserted, deleted or swapped, unicode, NUL
bytes), plus deep nesting and huge literals. Whatever the input, parsing returns a value or raises
``ExpressionError`` within a second, never executes anything (inputs that would leave a marker file if evaluated
leave none), and ``gradax schedule`` ends with exit code 0 or 2 and a ``gradax: error:`` message, no traceback.

``GRADAX_PROPERTY_EXAMPLES`` sets the number of examples (CI: a few dozen, derandomized)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradax.cli._expr import MAX_LENGTH, ExpressionError, parse_optimizer, parse_schedule
from gradax.cli._main import main

EXAMPLES = int(os.environ.get("GRADAX_PROPERTY_EXAMPLES", "0")) or 40
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
MARKER = Path(os.environ.get("TMPDIR", "/tmp")) / f"gradax-expr-fuzz-{os.getpid()}"


def _side_effects(marker: Path) -> list[str]:
    """Expressions that would create ``marker`` if anything evaluated them."""
    touch = f"__import__('os').system('touch {marker}')"
    write = f"open('{marker}', 'w').write('x')"
    return [
        touch,
        write,
        f"adam({touch})",
        f"adam(learning_rate={write})",
        f'exec("{write}")',
        f'eval("{write}")',
        f"f'{{{touch}}}'",
        f"(lambda: {touch})()",
        f"[{touch} for _ in [1]]",
        f"adam.__globals__['__builtins__']['__import__']('os').system('touch {marker}')",
        f"().__class__.__base__.__subclasses__()[0]('{marker}')",
        f"contrib.muon.__globals__['os'].system('touch {marker}')",
        f"getattr(__import__('os'), 'system')('touch {marker}')",
        f"adam(1e-3) if {touch} else sgd(1.0)",
        f"chain(adam(1e-3), {write})",
        f"inject_hyperparams(adam)(learning_rate={touch})",
        f"breakpoint() or {touch}",
        f"{{'k': {touch}}}",
        f"adam(*[{touch}])",
        f"adam(**{{'learning_rate': {touch}}})",
        f"(x := {touch})",
        f"adam({touch}[0])",
    ]


def _parse(expr: str, schedule: bool = False):
    """Parses ``expr``: the value, or the ``ExpressionError``; fails on any other exception or on a slow parse."""
    start = time.perf_counter()
    try:
        out = (parse_schedule if schedule else parse_optimizer)(expr).value
    except ExpressionError as err:
        out = err
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"parsing {expr[:80]!r} took {elapsed:.2f} s"
    return out


def test_side_effects_never_run(tmp_path):
    marker = tmp_path / "evaluated"
    for expr in _side_effects(marker):
        assert isinstance(_parse(expr), ExpressionError), expr
        assert isinstance(_parse(expr, schedule=True), ExpressionError), expr
        assert not marker.exists(), expr


NUMBERS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["1e999", "-1e999", "1e-999", "0", "-0.0", "0x10", "1_000", "1j", "True", "None", "'s'", "''"]),
)
NAMES = st.sampled_from(
    [
        "adam",
        "adamw",
        "sgd",
        "lion",
        "chain",
        "clip_by_global_norm",
        "inject_hyperparams",
        "contrib.muon",
        "fused.adamw",
        "lbfgs",
        "exponential_decay",
        "warmup_cosine_decay_schedule",
        "cosine_decay_schedule",
        "join_schedules",
        "MultiSteps",
        "schedules.constant_schedule",
        "unknown_name",
        "_private",
        "__import__",
        "os.system",
    ]
)
KEYWORDS = st.sampled_from(["learning_rate", "weight_decay", "b1", "memory_size", "every_k_schedule", "init_value"])


def _expressions():
    def extend(inner):
        args = st.lists(inner, max_size=3)
        kwargs = st.lists(st.tuples(KEYWORDS, inner), max_size=2)
        call = st.builds(
            lambda f, a, k: f"{f}({', '.join([*a, *(f'{n}={v}' for n, v in k)])})",
            NAMES,
            args,
            kwargs,
        )
        return st.one_of(
            call,
            args.map(lambda a: f"[{', '.join(a)}]"),
            args.map(lambda a: f"({', '.join(a)},)"),
            st.tuples(inner, inner).map(lambda kv: f"{{{kv[0]}: {kv[1]}}}"),
            inner.map(lambda x: f"-{x}"),
        )

    return st.recursive(st.one_of(NUMBERS, NAMES), extend, max_leaves=12)


@SETTINGS
@given(expr=_expressions())
def test_grammar_expressions(expr):
    for schedule in (False, True):
        _parse(expr, schedule)


def _mutate(expr: str, edits: list[tuple[int, int, str]]) -> str:
    for kind, position, text in edits:
        i = position % (len(expr) + 1)
        if kind == 0:
            expr = expr[:i] + text + expr[i:]
        elif kind == 1:
            expr = expr[:i] + expr[i + 1 :]
        else:
            expr = expr[:i] + text + expr[i + len(text) :]
    return expr


SEEDS = [
    "adamw(1e-3)",
    "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)))",
    "inject_hyperparams(adam)(learning_rate=0.1)",
    "join_schedules([constant_schedule(0.1), linear_schedule(0.1, 0.0, 100)], [50])",
    "contrib.muon(1e-3, ns_steps=5)",
]
EDIT_TEXT = st.one_of(
    st.text(max_size=3),
    st.sampled_from(["\x00", "(", ")", "[", "]", "{", "}", ",", "=", "*", "**", ".", "_", "'", '"', "\\", "é", "ａ"]),
)


@SETTINGS
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 200), EDIT_TEXT), min_size=1, max_size=4),
)
def test_mutated_expressions(seed, edits):
    for schedule in (False, True):
        _parse(_mutate(seed, edits), schedule)


@pytest.mark.parametrize(
    "expr, reason",
    [
        ("-" * 9_000 + "1", "expression is nested too deeply"),
        ("~" * 9_999 + "1", "expression is nested too deeply"),
        ("[" * 150 + "]" * 150, "not an optimizer"),
        ("adam(" * 90 + ")" * 90, "adam(): missing a required argument"),
        ("1" * 1_000_000, f"expression must be at most {MAX_LENGTH} characters; got 1000000"),
        ("adam(" + "9" * 9_000 + ")", "syntax error: Exceeds the limit"),
        ("adam(1e-3)\x00", "syntax error: source code string cannot contain null bytes"),
        ("{[1]: 2}", "a dict key must be a number, string, bool, None or tuple; got [1]"),
        ("{(1, [2]): 2}", r"a dict key must be a number, string, bool, None or tuple; got (1, [2])"),
    ],
)
def test_extreme_inputs(expr, reason):
    err = _parse(expr)
    assert isinstance(err, ExpressionError) and reason in err.reason


def test_state_sized_by_an_argument_is_not_allocated():
    """``lbfgs(memory_size=...)`` is built without initializing a state of that size (abstract init)."""
    assert hasattr(_parse("lbfgs(1e-3, memory_size=1000000000)"), "init")


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@SETTINGS
@given(
    seed=st.sampled_from(SEEDS + _side_effects(MARKER)),
    edits=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 200), EDIT_TEXT), max_size=3),
)
def test_cli_exit_codes(tmp_path_factory, seed, edits):
    """``gradax schedule --steps 2 --out x.txt -- EXPR``: every expression ends in exit code 2 (a schedule is refused
    for its ``--out``, everything else for the expression) with one ``gradax: error:`` message."""
    out = tmp_path_factory.mktemp("cli") / "x.txt"
    expr = _mutate(seed, edits)
    code, err = _cli(["schedule", "--steps", "2", "--out", str(out), "--", expr])  # -- : expressions may start with -
    assert code == 2 and err.startswith("gradax: error: ") and err.count("gradax: error:") == 1, err
    assert "Traceback" not in err and not MARKER.exists()


def test_cli_subprocess(tmp_path):
    marker = tmp_path / "evaluated"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for expr in (_side_effects(marker)[0], "adam(" * 90 + ")" * 90 + "\x01é"):
        proc = subprocess.run(
            [sys.executable, "-m", "gradax.cli", "schedule", expr, "--steps", "2", "--out", str(tmp_path / "s.png")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and proc.stderr.startswith("gradax: error: "), proc.stderr
        assert "Traceback" not in proc.stderr and not marker.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "gradax.cli", "schedule", "1e-3", "--steps", "2", "--out", str(tmp_path / "s.png")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and (tmp_path / "s.png").exists(), proc.stderr

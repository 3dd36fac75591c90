"""Safe parsing of optimizer and schedule expressions written in gradax's API.

An expression such as ``chain(clip_by_global_norm(1.0), adamw(learning_rate=1e-3))`` is parsed with :mod:`ast` and
built by looking names up in gradax's public namespace; nothing is ever passed to ``eval``. Allowed: calls of public
gradax functions (top level, or under a known submodule prefix such as ``contrib.``), literal arguments (numbers,
strings, bools, None, tuples, lists, dicts, unary minus/plus on numbers), nested calls and bare public function names
(``inject_hyperparams(adam)``). Everything else is refused with an :class:`ExpressionError` whose message shows the
expression and a caret under the offending part.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import types
import warnings
from dataclasses import dataclass, field
from typing import Any

import gradax

from .._base import is_transformation

#: Submodules whose public functions may be called as ``prefix.name(...)``. (``gradax.optimizers`` is not one: it
#: holds the implementations of names that are public at the top level, ``adam`` rather than ``optimizers.adam``.)
SUBMODULES = ("contrib", "schedules", "transforms", "fused")
#: Parameter kinds that take no keyword of their own (``*args``, ``**kwargs``): left out of "arguments: ..." hints.
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class ExpressionError(ValueError):
    """An expression that the CLI refuses; ``str(err)`` is the full message with a caret line."""

    def __init__(self, reason: str, expr: str, node: ast.AST | None = None):
        self.reason = reason
        self.expr = expr
        one_line = " ".join(expr.split("\n"))
        col, width = 0, max(1, len(one_line))
        if node is not None and getattr(node, "col_offset", None) is not None:
            col = node.col_offset
            end = getattr(node, "end_col_offset", None)
            line = getattr(node, "lineno", None)
            if getattr(node, "end_lineno", line) != line or end is None:
                end = len(one_line)
            width = max(1, end - col)
        self.col = col
        super().__init__(f"{reason}\n  {one_line}\n  {' ' * col}{'^' * width}")


def _public_functions(module: types.ModuleType) -> dict[str, Any]:
    out = {}
    for name in dir(module):
        if name.startswith("_"):
            continue
        obj = getattr(module, name)
        if isinstance(obj, types.ModuleType) or inspect.isclass(obj) or not callable(obj):
            continue
        out[name] = obj
    return out


def namespaces() -> dict[str | None, dict[str, Any]]:
    """Public callables by prefix (``None`` is the top level)."""
    spaces: dict[str | None, dict[str, Any]] = {None: _public_functions(gradax)}
    for prefix in SUBMODULES:
        mod = getattr(gradax, prefix, None)
        if isinstance(mod, types.ModuleType):
            spaces[prefix] = _public_functions(mod)
    return spaces


@dataclass
class Built:
    """The value of an expression plus, for a call, the function and its bound arguments."""

    value: Any
    fn: Any = None
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)


_LITERAL_TYPES = (int, float, str, bool, type(None))


class _Builder:
    def __init__(self, expr: str, wrap_lr: bool):
        self.expr = expr
        self.wrap_lr = wrap_lr
        self.spaces = namespaces()

    def fail(self, reason: str, node: ast.AST | None) -> ExpressionError:
        return ExpressionError(reason, self.expr, node)

    # -- names -------------------------------------------------------------------------------------------------
    def lookup(self, node: ast.AST) -> tuple[str, Any]:
        if isinstance(node, ast.Name):
            prefix, name = None, node.id
        elif isinstance(node, ast.Attribute):
            if not isinstance(node.value, ast.Name):
                raise self.fail("only one level of attribute access is allowed (e.g. contrib.muon)", node)
            prefix, name = node.value.id, node.attr
            if prefix not in self.spaces:
                known = ", ".join(p for p in self.spaces if p)
                raise self.fail(f"attribute access on {prefix!r} is not allowed; known prefixes: {known}", node.value)
        else:
            raise self.fail(f"{type(node).__name__} is not allowed here; expected a gradax function name", node)
        if name.startswith("_"):
            raise self.fail(f"private or dunder name {name!r} is not allowed", node)
        space = self.spaces[prefix]
        if name not in space:
            where = "gradax" if prefix is None else f"gradax.{prefix}"
            close = difflib.get_close_matches(name, list(space), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.fail(f"unknown name {name!r} (not a public function of {where}){hint}", node)
        return (name if prefix is None else f"{prefix}.{name}"), space[name]

    # -- values ------------------------------------------------------------------------------------------------
    def build(self, node: ast.AST) -> Built:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, _LITERAL_TYPES):
                raise self.fail(f"literal of type {type(node.value).__name__} is not allowed", node)
            return Built(node.value)
        if isinstance(node, ast.UnaryOp):
            if (
                isinstance(node.op, (ast.USub, ast.UAdd))
                and isinstance(node.operand, ast.Constant)
                and isinstance(node.operand.value, (int, float))
                and not isinstance(node.operand.value, bool)
            ):
                v = node.operand.value
                return Built(-v if isinstance(node.op, ast.USub) else v)
            raise self.fail("only unary minus or plus on a number is allowed", node)
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.build(e).value for e in node.elts]
            return Built(tuple(items) if isinstance(node, ast.Tuple) else items)
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    raise self.fail("dict unpacking (**) is not allowed", v)
                key = self.build(k).value
                if isinstance(key, (list, dict)) or (isinstance(key, tuple) and not _hashable(key)):
                    raise self.fail(f"a dict key must be a number, string, bool, None or tuple; got {key!r}", k)
                out[key] = self.build(v).value
            return Built(out)
        if isinstance(node, (ast.Name, ast.Attribute)):
            name, fn = self.lookup(node)
            return Built(fn, fn=None, name=name)
        if isinstance(node, ast.Call):
            return self.call(node)
        kinds = {
            ast.Lambda: "lambda",
            ast.BinOp: "arithmetic",
            ast.BoolOp: "boolean operator",
            ast.Compare: "comparison",
            ast.Subscript: "subscript",
            ast.IfExp: "conditional expression",
            ast.NamedExpr: "assignment expression",
            ast.JoinedStr: "f-string",
        }
        kind = next((v for k, v in kinds.items() if isinstance(node, k)), type(node).__name__)
        raise self.fail(f"{kind} is not allowed; use literals and gradax calls only", node)

    def call(self, node: ast.Call) -> Built:
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.fail("*args unpacking is not allowed", a)
        for kw in node.keywords:
            if kw.arg is None:
                raise self.fail("**kwargs unpacking is not allowed", kw.value)
        if isinstance(node.func, ast.Call):  # e.g. inject_hyperparams(adam)(learning_rate=...)
            fn = self.call(node.func).value
            name = ast.unparse(node.func)
            check_sig = False
        else:
            name, fn = self.lookup(node.func)
            check_sig = True
        args = [self.build(a).value for a in node.args]
        kwargs = {kw.arg: self.build(kw.value).value for kw in node.keywords if kw.arg is not None}  # None: refused
        arguments: dict[str, Any] = {}
        sig = None
        if check_sig or callable(fn):
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                sig = None
        if sig is not None:
            params = sig.parameters
            has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
            for kw in node.keywords:
                if kw.arg is not None and kw.arg not in params and not has_var_kw:
                    close = difflib.get_close_matches(kw.arg, list(params), n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    valid = ", ".join(p for p in params if params[p].kind not in _VARIADIC) or "none"
                    raise self.fail(f"{name}() has no argument {kw.arg!r}{hint} (arguments: {valid})", kw)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise self.fail(f"{name}(): {e}", node) from None
            arguments = dict(bound.arguments)
        try:  # built plainly first: its argument checks run on the concrete values
            value = fn(*args, **kwargs)
        except Exception as e:  # any construction error is reported against the call
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise self.fail(f"{name}(...) failed: {msg}", node) from None
        if self.wrap_lr and check_sig and sig is not None and "learning_rate" in sig.parameters:
            injected = self.try_inject(fn, args, kwargs)
            if injected is not None:
                value = injected
        return Built(value, fn=fn, name=name, arguments=arguments)

    @staticmethod
    def try_inject(fn, args, kwargs):
        """Build ``inject_hyperparams(fn)(...)`` so the learning rate can be read from the state; None if unsupported.

        An optimizer whose loop lengths are integer arguments (Muon's ``ns_steps``) is tried again with those
        arguments static, as its documentation asks."""
        import inspect

        import jax
        import jax.numpy as jnp

        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            counts = tuple(
                k for k, v in bound.arguments.items() if isinstance(v, int) and not isinstance(v, bool) and k != "seed"
            )
        except (TypeError, ValueError):
            counts = ()
        for static in ((), counts) if counts else ((),):
            try:
                opt = gradax.inject_hyperparams(fn, static_args=static)(*args, **kwargs)
                # abstract: no memory for a state whose size an argument sets (lbfgs(memory_size=10**9))
                state = jax.eval_shape(opt.init, {"w": jnp.zeros((2, 2), jnp.float32)})
                if gradax.tree.get(state, "learning_rate") is not None:
                    return opt
            except Exception:  # try the next way, then fall back to the plain optimizer
                continue
        return None


#: Longer expressions are refused before parsing (a million-digit literal costs no time or memory).
MAX_LENGTH = 10_000


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def parse(expr: str, *, wrap_lr: bool = False) -> Built:
    """Parse and build ``expr``. With ``wrap_lr``, optimizers taking a ``learning_rate`` are built through
    ``inject_hyperparams`` so that ``gradax.tree.get(state, "learning_rate")`` works."""
    if not isinstance(expr, str) or not expr.strip():
        raise ExpressionError("empty expression", str(expr or ""))
    src = expr.strip()
    if len(src) > MAX_LENGTH:
        raise ExpressionError(
            f"expression must be at most {MAX_LENGTH} characters; got {len(src)}. Write a shorter expression",
            src[:60] + "...",
        )
    try:
        with warnings.catch_warnings():  # no "invalid escape sequence" warnings in the CLI's output
            warnings.simplefilter("ignore")
            tree = ast.parse(src, mode="eval")
    except (MemoryError, RecursionError):  # Python's parser gives up on very deep nesting
        raise ExpressionError("expression is nested too deeply", src) from None
    except SyntaxError as e:
        node = ast.Constant(value=None)
        node.lineno = node.end_lineno = 1
        node.col_offset = max(0, (e.offset or 1) - 1)
        node.end_col_offset = node.col_offset + 1
        raise ExpressionError(f"syntax error: {e.msg}", src, node) from None
    try:
        return _Builder(src, wrap_lr).build(tree.body)
    except RecursionError:
        raise ExpressionError("expression is nested too deeply", src) from None


def parse_optimizer(expr: str) -> Built:
    """Parse an optimizer expression; the value must be a GradientTransformation."""
    built = parse(expr, wrap_lr=True)
    value = built.value
    if not is_transformation(value):
        node = ast.parse(expr.strip(), mode="eval").body
        raise ExpressionError(
            f"expression is a {type(value).__name__}, not an optimizer (GradientTransformation)", expr.strip(), node
        )
    return built


def parse_schedule(expr: str) -> Built:
    """Parse a schedule expression; the value must be a callable of the step, or a number (constant)."""
    built = parse(expr)
    value = built.value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        c = float(value)
        return Built(lambda count: c + 0.0 * count, name="constant", arguments={"value": c})
    if not callable(value) or is_transformation(value):
        node = ast.parse(expr.strip(), mode="eval").body
        what = "an optimizer" if is_transformation(value) else type(value).__name__
        raise ExpressionError(f"expression is {what}, not a schedule", expr.strip(), node)
    return built

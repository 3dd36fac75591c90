"""A griffe extension for the API reference: gradax docstrings are Google style with a few reStructuredText roles
(``.. math::`` blocks, ``:math:``, ``:class:``, ``:func:``, `` `text <url>`_ ``); rewrite those into the Markdown the
site renders. Math becomes MathML at build time (latex2mathml), which browsers render without JavaScript or a
network; a formula latex2mathml cannot convert is shown as its TeX source in code."""

from __future__ import annotations

import html
import re

import griffe
from latex2mathml.converter import convert as _to_mathml

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc|py:\w+):`~?([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_LINK = re.compile(r"`([^`<]+?)\s*<(https?://[^>]+)>`__?")


def mathml(tex: str, display: str = "inline") -> str:
    try:
        out = _to_mathml(tex, display=display).replace("\n", " ")
        # Python-Markdown treats a paragraph that starts with <math> as a raw HTML block; a span keeps it inline
        return out if display == "block" else f"<span>{out}</span>"
    except Exception:  # any formula latex2mathml does not support: show the TeX
        return f"<code>{html.escape(tex)}</code>"


def _math_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(".. math::"):
            indent = line[: len(line) - len(stripped)]
            body = [stripped[len(".. math::") :].strip()] if stripped[len(".. math::") :].strip() else []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
                body.append(lines[i].strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            out += ["", indent + mathml(" ".join(b for b in body if b), "block"), ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


_NAMES = re.compile(r"^\w+(?:,\s*\w+)+,?(?:\s*:|\s*$)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shared_args(text: str) -> str:
    """``a, b, c: text`` (one description for several arguments) becomes one ``name: text`` entry per name."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _NAMES.match(line.strip()):
            indent = _indent(line)
            entry = [line.strip()]
            i += 1
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > indent:
                entry.append(lines[i].strip())
                i += 1
            joined = " ".join(entry)
            names, _, desc = joined.partition(":")
            for name in (n.strip() for n in names.split(",")):
                if name:
                    out.append(" " * indent + f"{name}:{desc}")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _examples(text: str) -> str:
    """Doctest blocks (``>>>`` lines and their output) become fenced ``pycon`` code."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            pad = line[: _indent(line)]
            out.append(pad + "```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(pad + lines[i][len(pad) :] if lines[i].startswith(pad) else lines[i])
                i += 1
            out.append(pad + "```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    text = _examples(_shared_args(_math_blocks(text)))
    text = _LINK.sub(lambda m: f"[{m.group(1)}]({m.group(2)})", text)
    text = _MATH_ROLE.sub(lambda m: mathml(m.group(1)), text)
    return _ROLE.sub(lambda m: "`" + m.group(1) + "`", text)


class RstToMarkdown(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)

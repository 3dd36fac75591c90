"""The one table of the kernels' step scalars: the order in which Python stacks them and the C enums that index them.

A kernel takes the scalars of one step (betas, bias corrections, learning rate, ...) as one float32 vector. Python
stacks the vector in the order of a tuple here; the C sources index it with the enum constants of
``fused_scalars.h``, which :func:`header` generates from the same tuples when the library is built (the header is
part of the kernel cache's key). So the order lives in one place: add, remove or reorder a scalar here, use its
constant in the C source, and both sides follow.
"""

from __future__ import annotations

from typing import NamedTuple


class ScalarTable(NamedTuple):
    """The scalars of one kernel: C enum ``enum_name`` with constants ``prefix + NAME`` in this order, then
    ``count`` (their number)."""

    enum_name: str
    prefix: str
    count: str
    scalars: tuple[tuple[str, str], ...]  # (name, what it is), in the vector's order

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.scalars)


ADAMW = ScalarTable(
    "Scalar",
    "S_",
    "NS",
    (
        ("b1", "beta1"),
        ("one_minus_b1", "1 - beta1"),
        ("b2", "beta2"),
        ("one_minus_b2", "1 - beta2"),
        ("c1", "1 - beta1**t"),
        ("c1_next", "1 - beta1**(t+1) (Nesterov)"),
        ("c2", "1 - beta2**t"),
        ("eps", "epsilon"),
        ("eps_root", "epsilon inside the square root"),
        ("neg_lr", "-learning_rate"),
        ("grad_scale", "the clipping factor (1 without clipping)"),
        ("nesterov", "1 for NAdamW"),
        ("divides", "1: divide by c1, c2 (a tree of several leaves), 0: multiply by 1/c1, 1/c2 (one leaf)"),
        ("second_products", "1: contract the second product of v' and of Nesterov's sum (after clipping)"),
    ),
)

LION = ScalarTable(
    "LionScalar",
    "L_",
    "NL",
    (
        ("b1", "beta1"),
        ("one_minus_b1", "1 - beta1"),
        ("b2", "beta2"),
        ("one_minus_b2", "1 - beta2"),
        ("weight_decay", "the decay rate of decayed leaves"),
        ("neg_lr", "-learning_rate"),
    ),
)

ADAFACTOR = ScalarTable(
    "AdafactorScalar",
    "A_",
    "NA",
    (  # per leaf (a row of float32[n, NA]): u = (((g x) y) first) second, p <- p - u last
        ("b_first", "1 where the normalized factor x is the per-column one"),
        ("first_scale", "the first scalar factor of the update (1: none)"),
        ("second_scale", "the second scalar factor of the update (1: none)"),
        ("last_scale", "the last scalar factor, contracted with the subtraction from p where XLA does"),
        ("y_last", "1 when the update has no scalar factor: p <- p - (g x) y, the product by y contracted"),
    ),
)

MARS = ScalarTable(
    "MarsScalar",
    "M_",
    "NM",
    (
        ("b1", "beta1"),
        ("one_minus_b1", "1 - beta1"),
        ("b2", "beta2"),
        ("one_minus_b2", "1 - beta2"),
        ("inv_c1", "1 / (1 - beta1**t)"),
        ("inv_c2", "1 / (1 - beta2**t)"),
        ("eps", "epsilon"),
        ("scale", "gamma * beta1 / (1 - beta1), the weight of the gradient change"),
        ("max_norm", "the bound on each leaf's corrected gradient norm"),
        ("weight_decay", "the decay rate of decayed leaves"),
        ("neg_lr", "-learning_rate"),
    ),
)

CAUTIOUS_ADAMW = ScalarTable(
    "CautiousScalar",
    "CA_",
    "NCA",
    (
        ("b1", "beta1"),
        ("one_minus_b1", "1 - beta1"),
        ("b2", "beta2"),
        ("one_minus_b2", "1 - beta2"),
        ("c1", "1 - beta1**t"),
        ("c1_next", "1 - beta1**(t+1) (Nesterov)"),
        ("c2", "1 - beta2**t"),
        ("eps", "epsilon"),
        ("eps_root", "epsilon inside the square root"),
        ("weight_decay", "the decay rate of decayed leaves"),
        ("neg_lr", "-learning_rate"),
        ("nesterov", "1 for NAdamW"),
        ("divides", "1: divide by c1, c2 (a tree of several leaves), 0: multiply by 1/c1, 1/c2 (one leaf)"),
    ),
)

CAME = ScalarTable(
    "CameScalar",
    "CM_",
    "NCM",
    (
        ("b1", "beta1, the momentum's decay"),
        ("one_minus_b1", "1 - beta1"),
        ("b2", "beta2, the second moment's decay"),
        ("one_minus_b2", "1 - beta2"),
        ("b3", "beta3, the instability's decay"),
        ("one_minus_b3", "1 - beta3"),
        ("eps1", "added to the squared gradient's means"),
        ("eps2", "added to the instability's means"),
        ("clip_threshold", "the bound on the RMS of the normalized update"),
    ),
)

FACTORED = ScalarTable(
    "FactoredScalar",
    "FM_",
    "NFM",
    (
        ("decay", "the second moment's decay this step"),
        ("one_minus_decay", "1 - decay"),
        ("eps", "added to the squared gradient's means"),
    ),
)

TABLES = (ADAMW, LION, ADAFACTOR, MARS, CAUTIOUS_ADAMW, CAME, FACTORED)


def header() -> str:
    """The text of ``fused_scalars.h``: one enum per table, its constants in the table's order."""
    lines = [
        "/* Generated by gradax._kernels._scalars.header() when the kernels are built: the order of each kernel's",
        " * step scalars, which Python stacks in the same order. Edit the table there, not this file. */",
        "#ifndef GRADAX_FUSED_SCALARS_H",
        "#define GRADAX_FUSED_SCALARS_H",
        "",
    ]
    for table in TABLES:
        lines.append(f"enum {table.enum_name} {{")
        for name, what in table.scalars:
            lines.append(f"    {table.prefix}{name.upper()}, /* {what} */")
        lines += [f"    {table.count}", "};", ""]
    lines.append("#endif")
    return "\n".join(lines) + "\n"

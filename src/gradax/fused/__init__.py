"""Fused optimizer steps (not in Optax): update and apply in one pass over the parameters.

An optimizer in Optax's API returns updates, and ``apply_updates`` adds them to the params in a second pass. For
AdamW on the CPU this costs more than the arithmetic: XLA:CPU emits one kernel per output array, so a step is three
passes per leaf (new ``mu``, new ``nu``, new params) moving 40 bytes per parameter where one pass moves 28, and XLA
compiles three kernels per leaf (see the performance notes of the documentation).

:func:`adamw`, :func:`lion` and :func:`adafactor` return optimizers that are ordinary :class:`gradax.GradientTransformationExtraArgs`
(``init``/``update`` are those of ``gradax.adamw``/``gradax.lion``/``gradax.adafactor``, or of ``chain(clip_by_global_norm, adamw)``
with ``max_grad_norm``, states included, so checkpoints move between them and Optax) and add
``step(params, state, grads) -> (new_params, new_state)``, whose arguments come in the order of its results so that
``jax.jit(opt.step, donate_argnums=(0, 1))`` updates in place. On the CPU backend, in a single-device process or
inside ``shard_map``, ``step`` runs a C kernel over the tree (built on first use with the system C compiler and
cached; one call per 32 leaves, multithreaded, in place on donated buffers): AdamW with float32 or bfloat16 params
(28 or 22 bytes per parameter) or with 8-bit moments (16), Lion (20), and Adafactor's factored matrices in three
passes where XLA takes five. Anywhere else (GPU, GSPMD-sharded ``jit``,
other dtypes, no C compiler, ``jax_enable_x64``) it is ``update`` followed by ``apply_updates``, with the same
results.
"""

from .._fused_step import FusedGradientTransformation as FusedGradientTransformation
from ._adafactor import adafactor as adafactor
from ._adamw import adamw as adamw
from ._cautious import cautious_adamw as cautious_adamw
from ._common import kernel_status as kernel_status
from ._lion import lion as lion
from ._mars import mars as mars

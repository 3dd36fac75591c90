"""The names of the result columns, the bytes each workload's step must move, and the workloads' descriptions.

Plain data (no JAX, no torch): the report and the checks of RESULTS.md and README read them without building anything.
"""

IMPLS = ("gradax", "optax", "torch")
DISPATCH = "dispatch_floor"  # a donated identity step over the same arrays (see dispatch_floor)
COPY = "copy_reference"  # a donated jitted ``x + 1`` timed in every repeat beside the steps (see copy_reference)
FUSED = "gradax_fused"  # the column of gradax.fused.adamw(...).step (update and apply in one kernel on CPU)
FUSED_FLAT = "gradax_fused_flat"  # gradax.flatten(gradax.fused.adamw(...)).step: the same kernel on flat moments
FUSED_COLUMNS = (FUSED, FUSED_FLAT)

# Bytes per parameter that each step's math must move at minimum (float32 unless stated), used for % of copy
# bandwidth. Reads + writes of the arrays a fully fused step touches once each:
BYTES_PER_PARAM = {
    # read p, g, m, v (16) + write p, m, v (12)
    "adamw_gpt2": 28,
    "adamw_many_leaves": 28,
    "lion_many_leaves": 20,
    # as AdamW plus one extra read of g for the global norm (a fused step needs the norm before it can scale)
    "clip_adamw_schedule": 32,
    # read p, g, momentum (12) + write p, momentum (8)
    "sgd_nesterov": 20,
    # read p, g, m (12) + write p, m (8)
    "lion": 20,
    # factored matrices: read g twice (row/col statistics, then the update: 8) + read p (4) + write p (4); the
    # factored statistics are O(rows + cols) and ignored; vectors (biases, LayerNorm) also read and write v (+8)
    "adafactor": 16,
    # as AdamW: the no-decay group skips the decay term but apply_updates still reads and writes p
    "partition_decay": 28,
    # amortised over k=4 micro-steps: 3 accumulating micro-steps (24 each, below), and the 4th reads g, acc, p, m, v
    # and writes p, m, v, acc (36); (3 * 24 + 36) / 4 = 27
    "multisteps_adamw": 27,
    # a micro-step that only accumulates, with apply_updates in the same jitted step: MultiSteps reads g and acc and
    # writes acc (12); apply_updates reads p and the update (a select of zero, fused) and writes p (12)
    "multisteps_micro": 24,
    # bf16 params and grads, float32 moments: read p (2), g (2), m (4), v (4) + write p (2), m (4), v (4)
    "adamw_bf16": 22,
    # gradax's 8-bit moments: read p, g (8), m, v codes (2) + write p (4), m, v codes (2); block scales ignored
    "adamw_8bit": 16,
}

# What each workload runs (the table's first column).
DESCRIPTIONS = {
    "adamw_gpt2": "AdamW, GPT-2-small-shaped tree",
    "adamw_many_leaves": "AdamW, many small leaves",
    "lion_many_leaves": "Lion, many small leaves",
    "clip_adamw_schedule": "chain(clip_by_global_norm(1), adamw(warmup_cosine))",
    "sgd_nesterov": "SGD, Nesterov momentum 0.9",
    "lion": "Lion",
    "adafactor": "Adafactor",
    "partition_decay": "partition: decay / no-decay AdamW groups",
    "multisteps_adamw": "MultiSteps(adamw, 4), per micro-step",
    "multisteps_micro": "MultiSteps(adamw), a micro-step that only accumulates",
    "adamw_bf16": "AdamW, bf16 params and grads",
    "adamw_8bit": "AdamW, gradax 8-bit block-wise moments vs Optax float32",
    "compile_clip_adamw": "compile time only: clip+AdamW chain",
    "lbfgs_rosenbrock": "L-BFGS on Rosenbrock, time to converge",
}

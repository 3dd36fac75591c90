"""Registry entries for clipping, adding and constraining (transforms/_clipping.py, _adding.py, _constraining.py)."""

import jax

from . import Entry

ENTRIES = [
    Entry("clip", {"max_delta": 0.5}),
    Entry("clip_by_block_rms", {"threshold": 0.5}),
    Entry("clip_by_global_norm", {"max_norm": 1.0}),
    Entry("adaptive_grad_clip", {"clipping": 0.1}, needs_params=True),
    Entry("add_decayed_weights", {"weight_decay": 0.1}, needs_params=True),
    Entry(
        "add_decayed_weights",
        make=lambda ox: ox.add_decayed_weights(lambda c: 0.1 * 0.9**c),
        needs_params=True,
        inject=False,
    ),
    Entry(
        "add_decayed_weights",
        make=lambda ox: ox.add_decayed_weights(0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)),
        needs_params=True,
        inject=False,
    ),
    Entry(
        "add_noise",
        {"eta": 0.01, "gamma": 0.55, "key": 0},
    ),
    Entry("keep_params_nonnegative", needs_params=True),
    Entry("zero_nans"),
]

_TESTS = {
    "clipping": "tests/transforms/test_clipping.py",
    "adding": "tests/transforms/test_adding.py",
}

COVERED = {
    **{
        name: _TESTS["clipping"]
        for name in [
            "ClipState",
            "ClipByGlobalNormState",
            "AdaptiveGradClipState",
            "per_example_global_norm_clip",
            "per_example_layer_norm_clip",
            "transforms.adaptive_grad_clip",
            "transforms.clip",
            "transforms.clip_by_block_rms",
            "transforms.clip_by_global_norm",
            "transforms.per_example_global_norm_clip",
            "transforms.per_example_layer_norm_clip",
            "transforms.unitwise_clip",
            "transforms.unitwise_norm",
        ]
    },
    **{
        name: _TESTS["adding"]
        for name in [
            "AddDecayedWeightsState",
            "AddNoiseState",
            "NonNegativeParamsState",
            "ZeroNansState",
            "transforms.AddNoiseState",
            "transforms.add_decayed_weights",
            "transforms.add_noise",
            "transforms.NonNegativeParamsState",
            "transforms.ZeroNansState",
            "transforms.keep_params_nonnegative",
            "transforms.zero_nans",
        ]
    },
}

"""Registry entries for the non-Adam optimizers and per-element building blocks.

Modules: optimizers/_rms.py, _adagrad.py, _adadelta.py, _adafactor.py, _sm3.py, _rprop.py, _sign.py, _trust.py,
_noisy.py, _polyak.py, _misc.py.
"""

import jax
import jax.numpy as jnp

from . import Entry


def _value(params, grads, lib):
    del params, grads, lib
    return {"value": jnp.asarray(1.0)}


_SCHED = lambda c: 1e-2 / (1.0 + c)

ENTRIES = [
    # RMSProp family
    Entry("scale_by_rms", {"decay": 0.9, "eps": 1e-6}),
    Entry("scale_by_rms", make=lambda ox: ox.scale_by_rms(eps_in_sqrt=False, bias_correction=True)),
    Entry("scale_by_stddev", {"decay": 0.9, "eps": 1e-2}),
    # bias-corrected centred variance: a difference of two rounded terms, ~1.7e-5 relative after 10 steps
    Entry("scale_by_stddev", make=lambda ox: ox.scale_by_stddev(eps=1e-2, bias_correction=True), rtol=5e-5),
    Entry("rmsprop", {"learning_rate": 1e-2}),
    Entry("rmsprop", make=lambda ox: ox.rmsprop(_SCHED, centered=True, momentum=0.9, eps=1e-2), inject=False),
    # AdaGrad, AdaDelta
    Entry("scale_by_rss", {"initial_accumulator_value": 0.1}),
    Entry("adagrad", {"learning_rate": 1e-2}),
    Entry("scale_by_adadelta", {"rho": 0.9, "eps": 1e-6}),
    Entry("adadelta", {"learning_rate": 1.0, "weight_decay": 0.01}, needs_params=True),
    Entry("adadelta", make=lambda ox: ox.adadelta(_SCHED, weight_decay=_SCHED), needs_params=True, inject=False),
    # Adafactor
    Entry("scale_by_factored_rms", {"min_dim_size_to_factor": 2}, needs_params=True),
    Entry("adafactor", {"learning_rate": 1e-2, "min_dim_size_to_factor": 2}, needs_params=True),
    Entry(
        "adafactor",
        make=lambda ox: ox.adafactor(1e-2, min_dim_size_to_factor=2, momentum=0.9, weight_decay_rate=1e-3),
        needs_params=True,
    ),
    Entry("scale_by_param_block_norm", {"min_scale": 1e-3}, needs_params=True),
    Entry("scale_by_param_block_rms", {"min_scale": 1e-3}, needs_params=True),
    # SM3: Optax 0.2.8 raises IndexError on 0-d leaves (docs/differences.md); checked in tests/optimizers/test_sm3.py
    Entry("scale_by_sm3", {"b1": 0.9}, oracle=False),
    Entry("sm3", {"learning_rate": 1e-2}, oracle=False),
    # Rprop: Optax 0.2.8 emits the previous step's update (docs/differences.md); states compared in test_rprop.py
    Entry("scale_by_rprop", {"learning_rate": 1e-2}, oracle=False),
    Entry("rprop", {"learning_rate": 1e-2}, oracle=False),
    # sign methods
    Entry("scale_by_sign"),
    Entry("sign_sgd", {"learning_rate": 1e-2}),
    Entry("signum", {"learning_rate": 1e-2, "beta": 0.9}),
    # trust ratios
    Entry("scale_by_trust_ratio", {"trust_coefficient": 0.5}, needs_params=True),
    Entry("fromage", {"learning_rate": 1e-2}, needs_params=True),
    Entry("fromage", make=lambda ox: ox.fromage(_SCHED), needs_params=True, inject=False),
    Entry("lars", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True),
    Entry("lars", make=lambda ox: ox.lars(_SCHED, weight_decay=_SCHED), needs_params=True, inject=False),
    # noise, Polyak, DoG
    Entry("noisy_sgd", {"learning_rate": 1e-2, "eta": 0.0, "key": jax.random.key(0)}),
    Entry("noisy_sgd", {"learning_rate": 1e-2, "eta": 0.01, "key": 0}),
    Entry("scale_by_polyak", {"max_learning_rate": 0.1}, extra_args=_value),
    Entry("polyak_sgd", {"max_learning_rate": 0.1}, extra_args=_value),
    Entry(
        "scale_by_distance_over_gradients",
        {"reps_rel": 1e-4},
        needs_params=True,
        skip={"abstract_init": "the initial distance depends on the params' values (as in Optax)"},
    ),
    # misc
    Entry("normalize_by_update_norm", {"scale_factor": 1.0}),
    Entry("centralize"),
]

COVERED = {
    "ScaleByRmsState": "tests/optimizers/test_rms.py",
    "ScaleByRStdDevState": "tests/optimizers/test_rms.py",
    "ScaleByRssState": "tests/optimizers/test_adagrad.py",
    "ScaleByAdaDeltaState": "tests/optimizers/test_adadelta.py",
    "FactoredState": "tests/optimizers/test_adafactor.py",
    "ScaleBySM3State": "tests/optimizers/test_sm3.py",
    "ScaleByRpropState": "tests/optimizers/test_rprop.py",
    "ScaleByTrustRatioState": "tests/optimizers/test_trust.py",
    "scale_gradient": "tests/optimizers/test_misc.py",
}

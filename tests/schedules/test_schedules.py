"""Schedules: values equal Optax 0.2.8 (the oracle) at every step, eager, under jit and under vmap; errors."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

STEPS = np.arange(0, 45, dtype=np.int32)

CASES = {
    "constant": lambda ox: ox.constant_schedule(0.3),
    "linear": lambda ox: ox.linear_schedule(1.0, 0.1, transition_steps=17),
    "linear_begin": lambda ox: ox.linear_schedule(0.5, 2.0, transition_steps=9, transition_begin=5),
    "linear_zero_steps": lambda ox: ox.linear_schedule(0.5, 2.0, transition_steps=0),
    "polynomial": lambda ox: ox.polynomial_schedule(1.0, 0.01, power=2.5, transition_steps=30, transition_begin=3),
    "polynomial_power0": lambda ox: ox.polynomial_schedule(1.0, 0.01, power=0, transition_steps=10),
    "exponential": lambda ox: ox.exponential_decay(1.0, transition_steps=7, decay_rate=0.8),
    "exponential_stair": lambda ox: ox.exponential_decay(2.0, 5, 0.5, transition_begin=4, staircase=True),
    "exponential_end": lambda ox: ox.exponential_decay(1.0, 3, 0.5, end_value=0.2),
    "exponential_grow": lambda ox: ox.exponential_decay(1.0, 3, 1.5, end_value=4.0),
    "exponential_rate0": lambda ox: ox.exponential_decay(1.0, 3, 0.0),
    "cosine": lambda ox: ox.cosine_decay_schedule(0.7, decay_steps=25, alpha=0.1),
    "cosine_exponent": lambda ox: ox.cosine_decay_schedule(0.7, decay_steps=25, alpha=0.0, exponent=2.0),
    "piecewise_constant": lambda ox: ox.piecewise_constant_schedule(1.0, {5: 0.5, 10: 0.1, 20: 3.0}),
    "piecewise_constant_none": lambda ox: ox.piecewise_constant_schedule(1.0),
    "interp_linear": lambda ox: ox.piecewise_interpolate_schedule("linear", 1.0, {3: 2.0, 10: 0.5, 30: 0.1}),
    "interp_cosine": lambda ox: ox.piecewise_interpolate_schedule("cosine", 1.0, {0: 2.0, 10: 0.5, 30: 0.1}),
    "interp_empty": lambda ox: ox.piecewise_interpolate_schedule("linear", 0.4),
    "linear_onecycle": lambda ox: ox.linear_onecycle_schedule(40, 1.0),
    "cosine_onecycle": lambda ox: ox.cosine_onecycle_schedule(40, 1.0, pct_start=0.25),
    "warmup_constant": lambda ox: ox.warmup_constant_schedule(0.0, 1.0, warmup_steps=8),
    "warmup_constant_0": lambda ox: ox.warmup_constant_schedule(0.1, 1.0, warmup_steps=0),
    "warmup_cosine": lambda ox: ox.warmup_cosine_decay_schedule(0.0, 1.0, 10, 40, end_value=0.05),
    "warmup_cosine_0": lambda ox: ox.warmup_cosine_decay_schedule(0.0, 1.0, 0, 30, exponent=1.5),
    "warmup_exponential": lambda ox: ox.warmup_exponential_decay_schedule(0.0, 1.0, 5, 4, 0.7, 2, True, 0.3),
    "sgdr": lambda ox: ox.sgdr_schedule(
        [
            dict(init_value=0.0, peak_value=1.0, warmup_steps=3, decay_steps=10),
            dict(init_value=0.1, peak_value=0.5, warmup_steps=2, decay_steps=15, end_value=0.01),
        ]
    ),
    "join": lambda ox: ox.join_schedules(
        [ox.constant_schedule(1.0), ox.linear_schedule(1.0, 0.0, 10), ox.cosine_decay_schedule(0.5, 10)], [5, 15]
    ),
}


def test_polynomial_end_is_exact_under_jit():
    """Optax 0.2.8 bug: under jit, XLA turns ``t / T`` into ``t * (1/T)``, so ``1 - t/T`` is a tiny negative number
    at the end of the transition and a fractional power gives NaN (for every step from there on)."""
    steps = jnp.arange(0, 40)
    theirs = jax.jit(jax.vmap(optax.polynomial_schedule(1.0, 0.01, power=2.5, transition_steps=30)))(steps)
    ours = jax.jit(jax.vmap(gradax.polynomial_schedule(1.0, 0.01, power=2.5, transition_steps=30)))(steps)
    assert np.isnan(np.asarray(theirs)[30:]).all()  # the Optax behaviour, kept here to notice if it changes
    assert not np.isnan(np.asarray(ours)).any()
    np.testing.assert_array_equal(np.asarray(ours)[30:], np.float32(0.01))
    lin = jax.jit(gradax.linear_schedule(1.0, 0.0, transition_steps=1000))
    assert float(lin(jnp.int32(1000))) == 0.0 and float(lin(jnp.int32(2000))) == 0.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_optax_at_every_step(name):
    ours, theirs = CASES[name](gradax), CASES[name](optax)
    steps = jnp.asarray(STEPS)
    # vmap over steps (one compile), jit of vmap, and eager calls with Python ints and int32 scalars.
    expected = np.asarray(jax.vmap(lambda s: jnp.asarray(theirs(s), jnp.float32))(steps))
    got = np.asarray(jax.vmap(lambda s: jnp.asarray(ours(s), jnp.float32))(steps))
    np.testing.assert_array_equal(got, expected)
    got_jit = np.asarray(jax.jit(jax.vmap(lambda s: jnp.asarray(ours(s), jnp.float32)))(steps))
    np.testing.assert_allclose(got_jit, expected, rtol=1e-5, atol=1e-7)
    for s in (0, 1, 4, 5, 10, 15, 40, 44):
        np.testing.assert_allclose(np.asarray(ours(s), np.float32), np.asarray(theirs(s), np.float32), rtol=0)
        np.testing.assert_allclose(
            np.asarray(ours(jnp.int32(s)), np.float32), np.asarray(theirs(jnp.int32(s)), np.float32), rtol=2e-6
        )


def test_jit_scalar_step_matches_optax():
    ours = jax.jit(gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 40, end_value=0.05))
    theirs = jax.jit(optax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 40, end_value=0.05))
    for s in range(0, 45, 3):
        assert ours(jnp.int32(s)) == theirs(jnp.int32(s))
    # Under jit, Optax's linear schedules end slightly below end_value (1 - t * (1/T) < 0); ours end exactly on it.
    assert float(jax.jit(gradax.linear_schedule(1.0, 0.0, 30))(jnp.int32(30))) == 0.0


def test_boundary_conventions():
    lin = gradax.linear_schedule(1.0, 0.0, transition_steps=4, transition_begin=2)
    assert float(lin(0)) == 1.0 and float(lin(2)) == 1.0 and float(lin(6)) == 0.0 and float(lin(100)) == 0.0
    cos = gradax.cosine_decay_schedule(2.0, decay_steps=10, alpha=0.25)
    assert float(cos(0)) == 2.0 and float(cos(10)) == pytest.approx(0.5) and float(cos(1000)) == pytest.approx(0.5)
    pc = gradax.piecewise_constant_schedule(1.0, {3: 0.5})
    assert float(pc(2)) == 1.0 and float(pc(3)) == 0.5
    joined = gradax.join_schedules([gradax.constant_schedule(1.0), lambda s: 10.0 + s], [3])
    assert [float(joined(s)) for s in range(5)] == [1.0, 1.0, 1.0, 10.0, 11.0]
    warm = gradax.warmup_cosine_decay_schedule(0.0, 1.0, 4, 12, end_value=0.1)
    assert float(warm(0)) == 0.0 and float(warm(4)) == 1.0 and float(warm(12)) == pytest.approx(0.1)


def test_documented_fallbacks_are_kept():
    assert gradax.linear_schedule(0.3, 1.0, 0)(7) == 0.3
    assert gradax.polynomial_schedule(0.3, 1.0, 2, 0)(7) == 0.3
    assert gradax.exponential_decay(0.3, 0, 0.5)(7) == 0.3
    assert gradax.exponential_decay(0.3, 5, 0.0)(7) == 0.3
    assert float(gradax.warmup_constant_schedule(0.3, 1.0, 0)(7)) == 0.3
    assert float(gradax.warmup_cosine_decay_schedule(0.0, 1.0, 0, 10)(0)) == 1.0


NEGATIVE_LENGTHS = [
    ("linear_schedule", (1.0, 0.0, -1)),
    ("linear_schedule", (1.0, 0.0, 5, -2)),
    ("polynomial_schedule", (1.0, 0.0, 2.0, -5)),
    ("polynomial_schedule", (1.0, 0.0, 0.5, 4, -3)),
    ("exponential_decay", (1.0, -3, 0.5)),
    ("exponential_decay", (1.0, 0, -0.5)),
    ("exponential_decay", (1.0, 3, 0.5, -1)),
    ("exponential_decay", (1.0, 2, 0.5, -2, True, 0.3)),
    ("warmup_constant_schedule", (0.3, 1.0, -1)),
    ("warmup_cosine_decay_schedule", (0.0, 1.0, -2, 10)),
    ("warmup_exponential_decay_schedule", (0.0, 1.0, -1, 3, 0.5)),
    ("warmup_exponential_decay_schedule", (0.0, 1.0, 2, -3, 0.5, -1)),
]


@pytest.mark.parametrize("name,args", NEGATIVE_LENGTHS)
def test_negative_lengths_and_begins_follow_optax(name, args):
    # A negative length can come from arithmetic (``total_steps - warmup_steps`` in a short run): like Optax 0.2.8,
    # a length <= 0 gives the constant init_value and a negative transition_begin counts as 0.
    ours, theirs = getattr(gradax, name)(*args), getattr(optax, name)(*args)
    steps = jnp.arange(14)
    np.testing.assert_array_equal(jax.vmap(ours)(steps), jax.vmap(theirs)(steps))


def test_negative_lengths_are_logged(caplog):
    with caplog.at_level(logging.INFO, logger="gradax.schedules"):
        assert gradax.linear_schedule(0.3, 1.0, -4)(7) == 0.3
        assert float(gradax.exponential_decay(0.3, 2, 0.5, transition_begin=-1)(2)) == pytest.approx(0.15)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "A polynomial schedule with a non-positive `transition_steps` (-4): the schedule is the constant `init_value`.",
        "An exponential schedule with a negative `transition_begin` (-1): it counts as 0.",
    ]


def test_array_values_and_float64():
    sched = gradax.linear_schedule(jnp.array([1.0, 2.0]), 0.0, 4)
    np.testing.assert_allclose(sched(2), [0.5, 1.0])
    with jax.enable_x64(True):
        ours = gradax.cosine_decay_schedule(1.0, 7)(jnp.int64(3))
        theirs = optax.cosine_decay_schedule(1.0, 7)(jnp.int64(3))
        assert ours.dtype == theirs.dtype and ours == theirs


ERRORS = [
    (
        lambda: gradax.polynomial_schedule(1.0, 0.0, -1.0, 5),
        r"polynomial_schedule\(power=\.\.\.\) must be >= 0; got -1\.0\. A negative power is infinite",
    ),
    (
        lambda: gradax.exponential_decay(1.0, 3, -0.5),
        r"exponential_decay\(decay_rate=\.\.\.\) must be >= 0; got -0\.5\.",
    ),
    (lambda: gradax.cosine_decay_schedule(1.0, 0), r"cosine_decay_schedule\(decay_steps=\.\.\.\) must be > 0; got 0\."),
    (
        lambda: gradax.cosine_decay_schedule(1.0, 10, alpha=1.5),
        r"cosine_decay_schedule\(alpha=\.\.\.\) must be in \[0, 1\]; got 1\.5\.",
    ),
    (
        lambda: gradax.cosine_decay_schedule(1.0, 10, exponent=-1.0),
        r"cosine_decay_schedule\(exponent=\.\.\.\) must be >= 0; got -1\.0\.",
    ),
    (
        lambda: gradax.piecewise_constant_schedule(1.0, {5: -0.5}),
        r"piecewise_constant_schedule\(boundaries_and_scales=\.\.\.\) must be a dict of non-negative scale factors; "
        r"got \{5: -0\.5\}\. Step 5 has scale -0\.5",
    ),
    (
        lambda: gradax.piecewise_constant_schedule(1.0, {2.5: 0.5}),
        r"piecewise_constant_schedule\(boundaries_and_scales=\.\.\.\) must be a dict with int step keys",
    ),
    (
        lambda: gradax.piecewise_interpolate_schedule("quadratic", 1.0),
        r"piecewise_interpolate_schedule\(interpolate_type=\.\.\.\) must be 'linear' or 'cosine'; got 'quadratic'\.",
    ),
    (
        lambda: gradax.piecewise_interpolate_schedule("linear", 1.0, {4: -1.0}),
        r"piecewise_interpolate_schedule\(boundaries_and_scales=\.\.\.\) must be a dict of non-negative",
    ),
    (
        lambda: gradax.linear_onecycle_schedule(0, 1.0),
        r"linear_onecycle_schedule\(transition_steps=\.\.\.\) must be > 0; got 0\.",
    ),
    (
        lambda: gradax.linear_onecycle_schedule(10, 1.0, pct_start=0.9, pct_final=0.5),
        r"linear_onecycle_schedule\(pct_final=\.\.\.\) must be in \[0\.9, 1\]; got 0\.5\.",
    ),
    (
        lambda: gradax.linear_onecycle_schedule(10, 1.0, div_factor=0.0),
        r"linear_onecycle_schedule\(div_factor=\.\.\.\) must be > 0; got 0\.0\.",
    ),
    (
        lambda: gradax.cosine_onecycle_schedule(-4, 1.0),
        r"cosine_onecycle_schedule\(transition_steps=\.\.\.\) must be > 0; got -4\.",
    ),
    (
        lambda: gradax.cosine_onecycle_schedule(10, 1.0, pct_start=1.5),
        r"cosine_onecycle_schedule\(pct_start=\.\.\.\) must be in \[0, 1\]; got 1\.5\.",
    ),
    (
        lambda: gradax.cosine_onecycle_schedule(10, 1.0, final_div_factor=-1.0),
        r"cosine_onecycle_schedule\(final_div_factor=\.\.\.\) must be > 0; got -1\.0\.",
    ),
    (
        lambda: gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 10),
        r"warmup_cosine_decay_schedule\(decay_steps=\.\.\.\) must be > warmup_steps \(10\); got 10\. decay_steps counts",
    ),
    (
        lambda: gradax.warmup_cosine_decay_schedule(0.0, 1.0, 1, 10, exponent=-2.0),
        r"warmup_cosine_decay_schedule\(exponent=\.\.\.\) must be >= 0; got -2\.0\.",
    ),
    (
        lambda: gradax.warmup_exponential_decay_schedule(0.0, 1.0, 2, 3, -0.5),
        r"exponential_decay\(decay_rate=\.\.\.\) must be >= 0; got -0\.5\.",
    ),
    (
        lambda: gradax.sgdr_schedule([]),
        r"sgdr_schedule\(cosine_kwargs=\.\.\.\) must be a non-empty list of dicts; got \[\]\.",
    ),
    (
        lambda: gradax.sgdr_schedule([dict(init_value=0.0)]),
        r"sgdr_schedule\(cosine_kwargs=\.\.\.\) must be dicts of warmup_cosine_decay_schedule arguments",
    ),
    (lambda: gradax.join_schedules([], []), r"join_schedules\(schedules=\.\.\.\) must be a non-empty sequence"),
    (
        lambda: gradax.join_schedules([gradax.constant_schedule(1.0)] * 2, [1, 2]),
        r"join_schedules\(boundaries=\.\.\.\) must be one step fewer than schedules \(1\); got \[1, 2\]\.",
    ),
    (
        lambda: gradax.join_schedules([gradax.constant_schedule(1.0)] * 3, [5, 2]),
        r"join_schedules\(boundaries=\.\.\.\) must be non-decreasing; got \[5, 2\]\. Sort the boundaries",
    ),
]


@pytest.mark.parametrize("make, message", ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_arguments_are_not_checked():
    # Under jit, init values and rates may be tracers; construction must not fail on them.
    @jax.jit
    def f(rate, step):
        return gradax.exponential_decay(1.0, 4, rate)(step)

    np.testing.assert_allclose(f(0.5, 8), 0.25, rtol=1e-6)


def test_namespaces():
    for name in [
        "constant_schedule",
        "linear_schedule",
        "polynomial_schedule",
        "exponential_decay",
        "cosine_decay_schedule",
        "cosine_onecycle_schedule",
        "linear_onecycle_schedule",
        "piecewise_constant_schedule",
        "piecewise_interpolate_schedule",
        "sgdr_schedule",
        "warmup_constant_schedule",
        "warmup_cosine_decay_schedule",
        "warmup_exponential_decay_schedule",
        "join_schedules",
        "inject_hyperparams",
        "inject_stateful_hyperparams",
        "InjectHyperparamsState",
        "InjectStatefulHyperparamsState",
        "WrappedSchedule",
    ]:
        assert getattr(gradax, name) is getattr(gradax.schedules, name)
    assert gradax.schedules.Schedule is gradax.Schedule
    assert gradax.schedules.StatefulSchedule is not None

"""inject_hyperparams: identical to the plain factory, Optax's state layout and keys, dtype rules, static detection."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax._base import GradientTransformationExtraArgs
from tests import _stepping

PARAMS = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array(0.3)}


def grads(i, dtype=jnp.float32):
    return jax.tree.map(lambda p: (jnp.cos(p * (i + 1)) * (i + 1)).astype(dtype), PARAMS)


def run(opt, n=8, dtype=jnp.float32):
    """The updates and final state of ``n`` steps at fixed params."""
    params = jax.tree.map(lambda p: p.astype(dtype), PARAMS)
    updates, state, _ = _stepping.run(opt, params, lambda i, _: grads(i, dtype), n, apply=None)
    return updates, state


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


IDENTICAL = [
    ("sgd", dict(learning_rate=0.1)),
    ("sgd", dict(learning_rate=0.03, momentum=0.9)),
    ("sgd", dict(learning_rate=1, momentum=0.5, nesterov=True)),
    ("trace", dict(decay=0.999)),
    ("trace", dict(decay=0.7, nesterov=True)),
    ("scale", dict(step_size=-0.37)),
]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("name, kwargs", IDENTICAL, ids=[f"{n}-{sorted(k)}" for n, k in IDENTICAL])
def test_bit_identical_to_plain_factory(name, kwargs, dtype):
    factory = getattr(gradax, name)
    plain_updates, plain_state = run(factory(**kwargs), dtype=dtype)
    injected_updates, injected_state = run(gradax.inject_hyperparams(factory)(**kwargs), dtype=dtype)
    assert_same(plain_updates, injected_updates)
    assert_same(plain_state, injected_state.inner_state)


def test_schedule_matches_optax_and_state_layout():
    def make(ox):
        return ox.chain(
            ox.scale(1.0), ox.inject_hyperparams(ox.sgd)(learning_rate=ox.linear_schedule(0.1, 0.01, 5), momentum=0.9)
        )

    ours, ours_state = run(make(gradax), n=9)
    theirs, theirs_state = run(make(optax), n=9)
    for a, b in zip(ours, theirs):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), a, b)
    inj, ref = ours_state[1], theirs_state[1]
    assert type(inj).__name__ == type(ref).__name__ == "InjectStatefulHyperparamsState"
    assert inj._fields == ref._fields
    assert sorted(inj.hyperparams) == sorted(ref.hyperparams) == ["learning_rate", "momentum"]
    assert int(inj.count) == 9 and int(inj.hyperparams_states["learning_rate"].count) == 9
    np.testing.assert_allclose(inj.hyperparams["learning_rate"], ref.hyperparams["learning_rate"], rtol=1e-7)


def test_schedule_evaluated_before_increment_and_count_saturates():
    seen = []
    opt = gradax.inject_hyperparams(gradax.scale_by_learning_rate)(learning_rate=lambda c: 1.0 + c)
    state = opt.init(PARAMS)
    for _ in range(3):
        u, state = opt.update(PARAMS, state)
        seen.append(float(state.hyperparams["learning_rate"]))
    assert seen == [1.0, 2.0, 3.0]
    top = jnp.asarray(2**31 - 1, jnp.int32)
    state = state._replace(
        count=top, hyperparams_states={"learning_rate": state.hyperparams_states["learning_rate"]._replace(count=top)}
    )
    _, state = opt.update(PARAMS, state)
    assert state.count == top and state.hyperparams_states["learning_rate"].count == top


def test_adam_keys_match_optax():
    if not hasattr(gradax, "adam"):
        pytest.skip("gradax.adam is not written yet")
    ours = gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1).init(PARAMS)
    theirs = optax.inject_hyperparams(optax.adam)(learning_rate=0.1).init(PARAMS)
    assert sorted(ours.hyperparams) == sorted(theirs.hyperparams)


def test_hyperparams_stay_float32_for_bf16_params():
    opt = gradax.inject_hyperparams(gradax.trace)(decay=0.999)
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), PARAMS)
    state = opt.init(params)
    assert state.hyperparams["decay"].dtype == jnp.float32
    assert float(state.hyperparams["decay"]) == pytest.approx(0.999, abs=1e-7)
    _, state = opt.update(jax.tree.map(jnp.ones_like, params), state)
    assert state.hyperparams["decay"].dtype == jnp.float32
    # Optax 0.2.8 stores it in the params' dtype, where 0.999 rounds to 1.0.
    theirs = optax.inject_hyperparams(optax.trace)(decay=0.999).init(params)
    assert theirs.hyperparams["decay"].dtype == jnp.bfloat16 and float(theirs.hyperparams["decay"]) == 1.0


def test_hyperparam_dtype_argument_and_x64():
    opt = gradax.inject_hyperparams(gradax.sgd, hyperparam_dtype=jnp.bfloat16)(learning_rate=0.1)
    assert opt.init(PARAMS).hyperparams["learning_rate"].dtype == jnp.bfloat16
    with jax.enable_x64(True):
        state = gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1).init(PARAMS)
        assert state.hyperparams["learning_rate"].dtype == jnp.float64


def _factory(
    learning_rate: float,
    size: int = 4,
    name: str = "x",
    flag: bool = False,
    dtype=None,
    shape: tuple = (1, 2),
    mask=None,
    decay=0.5,
    table=None,
):
    seen = dict(
        learning_rate=learning_rate,
        size=size,
        name=name,
        flag=flag,
        dtype=dtype,
        shape=shape,
        mask=mask,
        decay=decay,
        table=table,
    )
    assert isinstance(size, int) and isinstance(name, str) and isinstance(flag, bool) and isinstance(shape, tuple)
    zeros = jnp.zeros((size,))  # needs a static int

    def init(params):
        return gradax.EmptyState()

    def update(updates, state, params=None):
        del params
        return jax.tree.map(lambda u: u * learning_rate * decay + jnp.sum(zeros), updates), state

    tx = GradientTransformationExtraArgs(init, lambda u, s, p=None, **kw: update(u, s, p))
    tx_seen.append(seen)
    return tx


tx_seen = []


class Mask(eqx.Module):
    keep: jax.Array

    def __call__(self, params):
        return jax.tree.map(lambda _: True, params)


def test_static_arguments_are_detected():
    tx_seen.clear()
    mask = Mask(jnp.ones(2))
    opt = gradax.inject_hyperparams(_factory)(
        learning_rate=2, size=3, name="n", flag=True, dtype=jnp.float16, shape=(3, 4), mask=mask, decay=1, table=[1]
    )
    state = opt.init(PARAMS)
    assert sorted(state.hyperparams) == ["decay", "learning_rate"]
    assert state.hyperparams["learning_rate"].dtype == jnp.float32 and float(state.hyperparams["learning_rate"]) == 2
    assert state.hyperparams["decay"].dtype == jnp.float32
    u, state = jax.jit(opt.update)(PARAMS, state)
    np.testing.assert_allclose(u["w"], PARAMS["w"] * 2)
    last = tx_seen[-1]
    assert last["mask"] is mask and last["size"] == 3 and last["shape"] == (3, 4) and last["dtype"] == jnp.float16
    assert last["table"] == [1] and last["name"] == "n" and last["flag"] is True


def test_callable_pytree_is_a_schedule_and_function_parameters_are_not_schedules():
    assert gradax._hyperparams.is_schedule(Mask(jnp.ones(2)))  # a callable hyperparameter is a schedule
    tx_seen.clear()
    plain_mask = lambda params: params
    opt = gradax.inject_hyperparams(_factory)(learning_rate=0.5, mask=plain_mask)
    state = opt.init(PARAMS)
    assert "mask" not in state.hyperparams and tx_seen[-1]["mask"] is plain_mask


def test_static_args_and_its_error():
    opt = gradax.inject_hyperparams(gradax.sgd, static_args="momentum")(learning_rate=0.1, momentum=0.9)
    assert sorted(opt.init(PARAMS).hyperparams) == ["learning_rate"]
    opt = gradax.inject_hyperparams(gradax.sgd, static_args=("momentum",))(0.1, 0.9)
    assert sorted(opt.init(PARAMS).hyperparams) == ["learning_rate"]
    with pytest.raises(
        ValueError,
        match=r"inject_hyperparams\(static_args=\.\.\.\) must be names of parameters of sgd; "
        r"got \[.lr.\]\. Its parameters are learning_rate, momentum, nesterov, accumulator_dtype, weight_decay, "
        r"weight_decay_mask, cautious_weight_decay\.",
    ):
        gradax.inject_hyperparams(gradax.sgd, static_args=["lr"])


def test_user_can_change_hyperparameters_between_steps():
    opt = gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1)
    state = opt.init(PARAMS)
    step = jax.jit(opt.update)
    u, state = step(PARAMS, state)
    state.hyperparams["learning_rate"] = 0.5
    u, state = step(PARAMS, state)
    np.testing.assert_allclose(u["w"], -0.5 * PARAMS["w"], rtol=1e-6)
    assert state.hyperparams["learning_rate"].dtype == jnp.float32
    state = gradax.tree.set(state, learning_rate=jnp.float32(0.25))
    u, state = step(PARAMS, state)
    np.testing.assert_allclose(u["w"], -0.25 * PARAMS["w"], rtol=1e-6)


def test_vmap_scan_and_abstract_init():
    opt = gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1, momentum=0.9)
    state = opt.init(PARAMS)
    lrs = jnp.array([0.1, 0.2, 0.3])

    def one(lr):
        s = state._replace(hyperparams={**state.hyperparams, "learning_rate": lr})
        return opt.update(PARAMS, s)[0]["w"]

    out = jax.vmap(one)(lrs)
    np.testing.assert_allclose(out, -lrs[:, None] * PARAMS["w"][None], rtol=1e-6)

    def body(s, i):
        u, s = opt.update(grads(0), s)
        return s, u["b"]

    final, bs = jax.lax.scan(body, state, jnp.arange(5))
    assert int(final.count) == 5 and bs.shape == (5,)
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), PARAMS)
    ab = opt.init(abstract)
    assert jax.tree.structure(ab) == jax.tree.structure(state)


class CountingSchedule:
    """A stateful schedule whose value is the number of times it saw a `loss` below 1."""

    def init(self):
        return jnp.zeros([], jnp.float32)

    def update(self, state, **extra_args):
        return state + (extra_args["loss"] < 1.0)

    def __call__(self, state, **extra_args):
        return 0.1 * (1.0 + state)


def test_extra_args_reach_inner_and_stateful_schedules():
    def needs_loss(learning_rate):
        def update(updates, state, params=None, *, loss):
            return jax.tree.map(lambda u: u * learning_rate * loss, updates), state

        return GradientTransformationExtraArgs(lambda p: gradax.EmptyState(), update)

    opt = gradax.inject_stateful_hyperparams(needs_loss)(learning_rate=CountingSchedule())
    state = opt.init(PARAMS)
    u, state = opt.update(PARAMS, state, loss=jnp.float32(0.5))
    np.testing.assert_allclose(u["b"], 0.1 * 0.5 * PARAMS["b"], rtol=1e-6)
    u, state = opt.update(PARAMS, state, loss=jnp.float32(2.0))
    np.testing.assert_allclose(u["b"], 0.2 * 2.0 * PARAMS["b"], rtol=1e-6)
    assert float(state.hyperparams_states["learning_rate"]) == 1.0


def test_get_learning_rate_through_chain():
    sched = gradax.linear_schedule(0.1, 0.0, 10)
    opt = gradax.chain(gradax.scale(1.0), gradax.inject_hyperparams(gradax.sgd)(learning_rate=sched))
    state = opt.init(PARAMS)
    _, state = opt.update(PARAMS, state)
    _, state = opt.update(PARAMS, state)
    np.testing.assert_allclose(gradax.tree.get(state, "learning_rate"), 0.09, rtol=1e-6)
    assert len(gradax.tree.get_all_with_path(state, "learning_rate")) == 2  # the value and the schedule's state
    state = gradax.tree.set(state, learning_rate=jnp.float32(0.5))
    assert type(state[1].hyperparams_states["learning_rate"]).__name__ == "WrappedScheduleState"


def test_get_learning_rate_clip_adamw_where_optax_raises():
    if not (hasattr(gradax, "adamw") and hasattr(gradax, "clip_by_global_norm")):
        pytest.skip("gradax.adamw / clip_by_global_norm are not written yet")

    def make(ox):
        return ox.chain(
            ox.clip_by_global_norm(1.0), ox.inject_hyperparams(ox.adamw)(learning_rate=ox.linear_schedule(0.1, 0.0, 10))
        )

    ours = gradax.tree.get(make(gradax).init(PARAMS), "learning_rate")
    np.testing.assert_allclose(ours, 0.1)
    with pytest.raises(KeyError, match="Found multiple values"):  # the Optax 0.2.8 behaviour
        optax.tree.get(make(optax).init(PARAMS), "learning_rate")


def test_two_groups_with_their_own_learning_rates_raise():
    state = (
        gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1).init(PARAMS),
        gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.2).init(PARAMS),
    )
    with pytest.raises(
        KeyError,
        match=r"tree\.get\(key='learning_rate'\) found 2 different values, at "
        r"\[0\]InjectStatefulHyperparamsState\.hyperparams\['learning_rate'\], "
        r"\[1\]InjectStatefulHyperparamsState\.hyperparams\['learning_rate'\]\. Pass filtering=",
    ):
        gradax.tree.get(state, "learning_rate")
    first = gradax.tree.get(state, "learning_rate", filtering=lambda path, v: path[0] == jax.tree_util.SequenceKey(0))
    np.testing.assert_allclose(first, 0.1)


def test_integer_seed_is_static_not_a_hyperparameter():
    import jax
    import jax.numpy as jnp

    import gradax

    params = jnp.ones(3)
    injected = gradax.inject_hyperparams(gradax.add_noise)(eta=0.01, gamma=0.55, key=0)
    plain = gradax.add_noise(0.01, 0.55, key=0)
    state = injected.init(params)
    assert "key" not in state.hyperparams
    u1, _ = jax.jit(injected.update)(params, state)
    u2, _ = jax.jit(plain.update)(params, plain.init(params))
    assert jnp.array_equal(u1, u2)

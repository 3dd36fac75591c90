"""The helpers every module shares: state builders (``_state``), ``hyper_values`` and the transformation check."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle: an Optax transformation is a transformation too
import pytest

import gradax
from gradax import contrib
from gradax._base import check_transformation, is_transformation
from gradax._hyperparams import hyper_values
from gradax._state import full_state_like, zeros_like_params, zeros_state_like

PARAMS = {"w": jnp.ones((2, 3), jnp.bfloat16), "b": jnp.ones(3, jnp.float32), "n": None, "i": jnp.ones(2, jnp.int32)}


def _dtypes(tree):
    return jax.tree.map(lambda x: jnp.dtype(x.dtype).name, tree)


def test_state_builders_follow_the_state_dtype_rule():
    f = "float64" if jax.config.jax_enable_x64 else "float32"
    assert _dtypes(zeros_state_like(PARAMS)) == {"w": "float32", "b": "float32", "n": None, "i": f}
    assert _dtypes(zeros_state_like(PARAMS, jnp.bfloat16)) == {
        "w": "bfloat16",
        "b": "bfloat16",
        "n": None,
        "i": "bfloat16",
    }
    assert _dtypes(zeros_like_params(PARAMS)) == {"w": "bfloat16", "b": "float32", "n": None, "i": "int32"}
    full = full_state_like(PARAMS, 0.5)
    assert _dtypes(full) == _dtypes(zeros_state_like(PARAMS))
    np.testing.assert_array_equal(full["w"], np.full((2, 3), 0.5, np.float32))


def test_state_builders_take_abstract_leaves_and_python_numbers():
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), PARAMS)
    for build in (zeros_state_like, zeros_like_params, lambda t: full_state_like(t, 2.0)):
        concrete, from_abstract = build(PARAMS), build(abstract)
        assert jax.tree.map(jnp.shape, concrete) == jax.tree.map(jnp.shape, from_abstract)
        assert _dtypes(concrete) == _dtypes(from_abstract)
    assert zeros_state_like(1.5).shape == () and full_state_like(3, 1.0).dtype == jnp.dtype(jnp.float32)


def test_full_state_like_gives_each_leaf_its_own_buffer():
    value = jnp.asarray(0.1, jnp.float32)
    out = full_state_like({"a": jnp.zeros(()), "b": jax.ShapeDtypeStruct((), jnp.float32)}, value)
    pointers = {x.unsafe_buffer_pointer() for x in (*jax.tree.leaves(out), value)}
    assert len(pointers) == 3


def test_hyper_values_are_float32_arrays():
    b1, lr = hyper_values(0.9, jnp.asarray(1e-3, jnp.bfloat16))
    assert b1.dtype == lr.dtype == (jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    assert float(b1) == pytest.approx(0.9)


def test_is_transformation():
    assert is_transformation(gradax.adam(1e-3)) and is_transformation(optax.sgd(0.1))
    assert not is_transformation(gradax.adam)  # the factory, not the transformation
    assert not is_transformation(gradax.GradientTransformation)  # the class: its fields are not functions
    assert not is_transformation(gradax.adam(1e-3).init(jnp.zeros(1)))  # a state


def test_check_transformation_message():
    check_transformation("api", "inner", gradax.sgd(0.1))
    with pytest.raises(TypeError, match=r"^api\(inner=\.\.\.\) must be a GradientTransformation; got int\. Fix it\.$"):
        check_transformation("api", "inner", 3, "Fix it")


@pytest.mark.parametrize(
    "build, pattern",
    [
        (lambda: gradax.lookahead(1, 2, 0.5), r"lookahead\(fast_optimizer=\.\.\.\) must be a GradientTransformation"),
        (lambda: gradax.flatten("adam"), r"flatten\(inner=\.\.\.\) must be a GradientTransformation; got str\. Pass"),
        (lambda: gradax.masked(None, {}), r"masked\(inner=\.\.\.\) must be a GradientTransformation; got NoneType"),
        (lambda: gradax.MultiSteps(gradax.adam, 2), r"MultiSteps\(opt=\.\.\.\) must be a GradientTransformation"),
        (lambda: gradax.lbfgs(linesearch=1), r"lbfgs\(linesearch=\.\.\.\) must be a GradientTransformation or None"),
        (lambda: contrib.schedule_free(1.0, 0.1), r"schedule_free\(base_optimizer=\.\.\.\) must be a Gradient"),
        (lambda: gradax.chain(gradax.sgd(1.0), 2), r"chain\(\.\.\.\) takes GradientTransformations; argument 1"),
        (
            lambda: gradax.multi_transform({"a": 1}, {"w": "a"}),
            r"multi_transform\(transforms=\.\.\.\) must map each label to a GradientTransformation; transforms\['a'\]",
        ),
        (
            lambda: gradax.with_extra_args_support(object()),
            r"with_extra_args_support\(tx=\.\.\.\) must be a GradientTransformation; got object\. Build one",
        ),
    ],
)
def test_wrappers_reject_what_is_not_a_transformation(build, pattern):
    with pytest.raises(TypeError, match=pattern):
        build()

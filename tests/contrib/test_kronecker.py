"""gradax.contrib._kronecker.mode_product (SOAP's and Shampoo's rotations) against float64 NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradax.contrib._kronecker import mode_product


def _reference(x, mats, transpose):
    """``x ×_i M_i^T`` (or ``x ×_i M_i``) one axis at a time, with ``np.einsum`` on the axis where it is."""
    for i, m in enumerate(mats):
        if m is None:
            continue
        letters = "abcdefgh"[: x.ndim]
        out = letters.replace(letters[i], "z")
        spec = f"{letters},{'z' + letters[i] if transpose else letters[i] + 'z'}->{out}"
        x = np.einsum(spec, x, m)
    return x


@pytest.mark.parametrize("shape", [(5,), (7, 4), (4, 7), (3, 5, 6), (2, 3, 4, 5)])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("skip", [None, 0, -1])
def test_mode_product_is_the_product_on_each_axis(shape, transpose, skip):
    rng = np.random.default_rng(len(shape))
    x = rng.normal(size=shape)
    mats = [rng.normal(size=(d, d)) for d in shape]
    if skip is not None:
        mats[skip] = None  # a None factor leaves its axis as it is
    with jax.enable_x64(True):
        got = jax.jit(lambda x, ms: mode_product(x, ms, transpose))(
            jnp.asarray(x), tuple(None if m is None else jnp.asarray(m) for m in mats)
        )
    np.testing.assert_allclose(np.asarray(got), _reference(x, mats, transpose), rtol=1e-12, atol=1e-12)

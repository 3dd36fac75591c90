r"""Block-wise 8-bit storage of optimizer moments (after Dettmers et al., 2022).

A moment array is flattened, padded with zeros to a multiple of ``block_size`` and cut into blocks. Each block keeps
one float32 scale :math:`s_b \ge \max_{i \in b} |x_i|` and one 8-bit code per element for
:math:`y_i = x_i / s_b \in [-1, 1]`. A step decodes the codes to float32, does the optimizer's arithmetic in float32
(the update of the step uses these unrounded moments) and encodes the new moments again.

The 8-bit codes are small floating-point numbers relative to the block's scale, encoded and decoded with integer
operations on the float32 bit pattern (no table look-up, no transcendental functions, so they vectorize well on CPU):

* signed moments (Adam's and Lion's first moment): 1 sign bit, 4 exponent bits, 3 mantissa bits: magnitudes from
  :math:`2^{-15}` to 1 of the block's scale, relative rounding error at most :math:`2^{-4}` (6.25%);
* non-negative moments (Adam's second moment :math:`\nu`): the code stores :math:`\sqrt{\nu}/s_b` with 4 exponent
  bits and 4 mantissa bits (no sign bit is needed): the denominator :math:`\sqrt{\nu}` of Adam's update is kept
  within :math:`2^{-5}` (3.1%) relative error over 16 binades, i.e. :math:`\nu` over 32 binades (down to
  :math:`2.3 \cdot 10^{-10}` of the block's largest value).

Code 0 is an exact zero; magnitudes below the smallest code are flushed to zero. Because a float code has the same
relative precision at every magnitude, the scale need not be the exact block absmax, only an upper bound: the
optimizers update it as :math:`s_b \leftarrow \beta s_b + (1-\beta) \max_{i \in b} |g_i|` (for :math:`\sqrt{\nu}`:
:math:`\sqrt{\beta_2 s_b^2 + (1-\beta_2) \max_b g^2}`), which bounds the new moments from the old scale and one
reduction over the gradient, instead of a second pass over the new moments (on XLA:CPU that pass materializes the
float32 moments and made the step 2-3x slower). The slack only moves the window of 16 binades up by a few binades.

The optimizers round stochastically (:func:`dither`, a stateless hash of the element's index and the step count):
with round-to-nearest, an increment of a moving average smaller than half a code step (:math:`(1-\beta_2)\, g^2` for
:math:`\beta_2 = 0.999`, or Lion's :math:`(1-\beta_2)\, g` for :math:`\beta_2 = 0.99`) would always be lost and the
moment would freeze; stochastic rounding keeps it on average.

The optimizers (Adam's and Lion's ``scale_by_*``) go through one interface: :func:`quantized_zeros` builds the
initial state, and :func:`quantized_step` runs an optimizer's dense per-array math on decoded blocks, reading and
writing each moment through its :class:`QuantizedMoment` kind (:data:`FIRST_MOMENT`, :data:`SECOND_MOMENT`).

These integer codes are as accurate as ``jnp.float8_e4m3fn`` ones on the first moment and faster to convert on CPU;
the measured errors are in the documentation's 8-bit guide (``docs/guides/8bit.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import argument_error, check_int
from ._numerics import leaf_dtype, state_dtype, zeros_for

_F32_MANTISSA = 23
_F32_ONE_EXPONENT = 127


class BlockQuantized(NamedTuple):
    """A moment array stored block-wise in 8 bits: the state leaf of the quantized moments.

    ``codes`` has shape ``(num_blocks, block_size)`` (the flattened array padded with zeros) and dtype uint8;
    ``scale`` has shape ``(num_blocks,)`` and dtype float32. The array's own shape is the shape of the matching
    update, so it is not stored.
    """

    codes: jax.Array  # shape=(num_blocks, block_size), dtype=uint8
    scale: jax.Array  # shape=(num_blocks,), dtype=float32: block absmax (of sqrt(nu) for second moments)


@dataclasses.dataclass(frozen=True)
class _Format:
    """A small float format for magnitudes in [0, 1]: ``exp_bits`` exponent and ``man_bits`` mantissa bits."""

    exp_bits: int
    man_bits: int

    @property
    def top(self) -> int:
        return (1 << (self.exp_bits + self.man_bits)) - 1

    @property
    def shift(self) -> int:
        return _F32_MANTISSA - self.man_bits

    @property
    def offset(self) -> int:
        # code c >= 1 is the float32 whose (exponent, mantissa) bits, shifted right by `shift`, are c + offset; the
        # top code is 1.0.
        return (_F32_ONE_EXPONENT << self.man_bits) - self.top

    def encode(self, y: jax.Array, noise: jax.Array | None = None) -> jax.Array:
        """int32 codes in ``[0, top]`` of magnitudes ``0 <= y <= 1`` (float32).

        Rounded to nearest, or stochastically (up with probability equal to the fraction of the gap) when ``noise``,
        uniform random uint32 bits like ``y``, is given.
        """
        bits = jax.lax.bitcast_convert_type(y, jnp.int32)
        if noise is None:
            offset = jnp.int32(1 << (self.shift - 1))
        else:
            offset = jax.lax.shift_right_logical(noise, jnp.uint32(32 - self.shift)).astype(jnp.int32)
        q = (bits + offset) >> self.shift
        return jnp.clip(q - self.offset, 0, self.top)

    def decode(self, code: jax.Array) -> jax.Array:
        """float32 magnitudes of int32 ``code`` (0 decodes to 0)."""
        value = jax.lax.bitcast_convert_type((code + self.offset) << self.shift, jnp.float32)
        return jnp.where(code == 0, jnp.zeros((), jnp.float32), value)

    def table(self) -> np.ndarray:
        """Every representable magnitude, for the tests (float64)."""
        codes = np.arange(self.top + 1, dtype=np.int64)
        bits = ((codes + self.offset) << self.shift).astype(np.uint32)
        values = bits.view(np.float32).astype(np.float64)
        values[0] = 0.0
        return values


_SIGNED = _Format(exp_bits=4, man_bits=3)  # + 1 sign bit
_UNSIGNED = _Format(exp_bits=4, man_bits=4)  # of sqrt(nu)


def blocks(x: jax.Array, block_size: int) -> jax.Array:
    """``x`` flattened, padded with zeros to a multiple of ``block_size`` and shaped ``(num_blocks, block_size)``."""
    flat = jnp.ravel(x)
    num_blocks = -(-flat.size // block_size)
    pad = num_blocks * block_size - flat.size
    if pad:
        flat = jnp.pad(flat, (0, pad))
    return flat.reshape(num_blocks, block_size)


def unblock(values: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The inverse of :func:`blocks`: drops the padding and restores ``shape``."""
    size = math.prod(shape)
    flat = values.reshape(-1)
    if flat.size != size:
        flat = flat[:size]
    return flat.reshape(shape)


def block_absmax(x_blocks: jax.Array) -> jax.Array:
    """The float32 largest magnitude of each block (row) of ``x_blocks``.

    Written as ``max(max(x), -min(x))``: two plain reductions of the (already materialized) input, which XLA:CPU runs
    fast, where ``max(abs(x))`` would first write ``abs(x)`` to a temporary as large as ``x``.
    """
    top = jnp.max(x_blocks, axis=1).astype(jnp.float32)
    bottom = jnp.min(x_blocks, axis=1).astype(jnp.float32)
    return jnp.maximum(top, -bottom)


def dither(shape: tuple[int, ...], seed: jax.Array) -> jax.Array:
    """Pseudo-random uint32 bits for each element of ``shape``, a hash of the element's index and ``seed``.

    Stateless and cheap (a few integer operations per element): used for stochastic rounding, so that the small
    increments of a moving average are kept on average instead of always being rounded away.
    """
    index = jax.lax.broadcasted_iota(jnp.uint32, shape, 0) * jnp.uint32(shape[1]) + jax.lax.broadcasted_iota(
        jnp.uint32, shape, 1
    )
    x = index * jnp.uint32(0x9E3779B1) + jnp.asarray(seed).astype(jnp.uint32) * jnp.uint32(0x85EBCA6B)
    x = x ^ jax.lax.shift_right_logical(x, jnp.uint32(16))
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ jax.lax.shift_right_logical(x, jnp.uint32(15))
    x = x * jnp.uint32(0x846CA68B)
    return x ^ jax.lax.shift_right_logical(x, jnp.uint32(16))


def dither_pair(shape: tuple[int, ...], seed: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two streams of rounding bits from one :func:`dither` hash: the hash, and the hash with its 16-bit halves
    swapped. A signed code's rounding reads the top 20 bits of the first and a root code's the top 19 of the
    second, which share 3 low-order bits, so the two roundings are nearly independent for half the hashing."""
    noise = dither(shape, seed)
    swapped = (noise << jnp.uint32(16)) | jax.lax.shift_right_logical(noise, jnp.uint32(16))
    return noise, swapped


def _inverse(scale: jax.Array) -> jax.Array:
    return jnp.where(scale > 0, 1.0 / jnp.where(scale > 0, scale, 1.0), 0.0)


def encode_signed_blocks(x_blocks: jax.Array, scale: jax.Array, noise: jax.Array | None = None) -> jax.Array:
    """uint8 codes of ``x_blocks / scale`` (one scale per row, ``|x| <= scale``): sign, 4 exponent, 3 mantissa bits.

    Rounded to nearest, or stochastically with the uint32 bits ``noise`` (:func:`dither`, shaped like ``x_blocks``)
    when they are given.
    """
    y = x_blocks.astype(jnp.float32) * _inverse(scale)[:, None]
    bits = jax.lax.bitcast_convert_type(y, jnp.int32)
    magnitude = _SIGNED.encode(jax.lax.bitcast_convert_type(bits & 0x7FFFFFFF, jnp.float32), noise)
    sign = jax.lax.shift_right_logical(bits, jnp.int32(31)) << 7
    return (sign | magnitude).astype(jnp.uint8)


def decode_signed_blocks(q: BlockQuantized) -> jax.Array:
    """The float32 blocks ``(num_blocks, block_size)`` that signed codes stand for."""
    code = q.codes.astype(jnp.int32)
    magnitude = _SIGNED.decode(code & 0x7F)
    signed = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(magnitude, jnp.int32) | ((code >> 7) << 31), jnp.float32
    )
    return signed * q.scale[:, None]


def encode_root_blocks(root_blocks: jax.Array, scale: jax.Array, noise: jax.Array | None = None) -> jax.Array:
    """uint8 codes of non-negative ``root_blocks / scale`` (``root <= scale``): 4 exponent and 4 mantissa bits.

    Rounded to nearest, or stochastically with the uint32 bits ``noise`` (:func:`dither`, shaped like
    ``root_blocks``) when they are given.
    """
    y = root_blocks.astype(jnp.float32) * _inverse(scale)[:, None]
    return _UNSIGNED.encode(y, noise).astype(jnp.uint8)


def decode_root_blocks(q: BlockQuantized) -> jax.Array:
    """The float32 non-negative blocks that unsigned codes stand for (:math:`\\sqrt{\\nu}` for second moments)."""
    return _UNSIGNED.decode(q.codes.astype(jnp.int32)) * q.scale[:, None]


def encode_signed(x: jax.Array, block_size: int) -> BlockQuantized:
    """Block-wise 8-bit codes of a real array, scaled by each block's exact absmax."""
    x_blocks = blocks(x.astype(jnp.float32), block_size)
    scale = block_absmax(x_blocks)
    return BlockQuantized(encode_signed_blocks(x_blocks, scale), scale)


def decode_signed(q: BlockQuantized, shape: tuple[int, ...]) -> jax.Array:
    """The float32 array of shape ``shape`` that :func:`encode_signed` codes stand for."""
    return unblock(decode_signed_blocks(q), shape)


def encode_second_moment(v: jax.Array, block_size: int) -> BlockQuantized:
    """Block-wise 8-bit codes of a non-negative array ``v``: of :math:`\\sqrt{v}` relative to the block's largest."""
    root = jnp.sqrt(blocks(v.astype(jnp.float32), block_size))
    scale = jnp.max(root, axis=1)
    return BlockQuantized(encode_root_blocks(root, scale), scale)


def decode_second_moment(q: BlockQuantized, shape: tuple[int, ...]) -> jax.Array:
    """The float32 array of shape ``shape`` that :func:`encode_second_moment` codes stand for."""
    root = decode_root_blocks(q)
    return unblock(root * root, shape)


@dataclasses.dataclass(frozen=True)
class QuantizedMoment:
    r"""How an optimizer reads, bounds and writes one kind of 8-bit moment (the interface the optimizers use).

    Two kinds exist: :data:`FIRST_MOMENT`, a signed moving average of the gradient (Adam's :math:`m`, Lion's
    momentum), coded with a sign bit; and :data:`SECOND_MOMENT`, a moving average of :math:`|g|^2` (Adam's
    :math:`\nu`), stored as :math:`\sqrt{\nu}` without a sign bit. :func:`quantized_step` runs an optimizer's math
    for one dense array on them.
    """

    signed: bool  # True: a signed moment; False: a non-negative second moment kept as its square root

    def read(self, q: BlockQuantized) -> jax.Array:
        """The float32 moment blocks ``(num_blocks, block_size)`` that ``q`` stands for."""
        if self.signed:
            return decode_signed_blocks(q)
        root = decode_root_blocks(q)
        return root * root

    def next_scale(self, q: BlockQuantized, g_absmax: jax.Array, decay: Any, one_minus_decay: Any) -> jax.Array:
        r"""Per-block upper bounds of the new moment's magnitude (of its root for a second moment), from the old
        scales and the gradient's block absmax: :math:`\beta s + (1-\beta) \max|g|`, or
        :math:`\sqrt{\beta s^2 + (1-\beta) \max|g|^2}` (no pass over the new moment is needed)."""
        if self.signed:
            return (decay * q.scale + one_minus_decay * g_absmax).astype(jnp.float32)
        return jnp.sqrt(decay * q.scale * q.scale + one_minus_decay * g_absmax * g_absmax).astype(jnp.float32)

    def write(self, moment_blocks: jax.Array, scale: jax.Array, noise: jax.Array) -> BlockQuantized:
        """The 8-bit codes of float32 moment blocks under ``scale``, rounded stochastically with ``noise``."""
        if self.signed:
            return BlockQuantized(encode_signed_blocks(moment_blocks, scale, noise), scale)
        return BlockQuantized(encode_root_blocks(jnp.sqrt(moment_blocks), scale, noise), scale)


FIRST_MOMENT = QuantizedMoment(signed=True)
SECOND_MOMENT = QuantizedMoment(signed=False)


def quantized_step(
    leaf: Callable[..., tuple[jax.Array, ...]],
    moments: Sequence[tuple[QuantizedMoment, Any, Any]],
    seed: jax.Array,
) -> Callable[..., tuple[Any, ...]]:
    """An optimizer's step for one array, ``leaf(g, *moments) -> (update, *new_moments)``, run on 8-bit moments.

    ``moments`` gives, for each moment of ``leaf`` in order, its kind and the ``(decay, one_minus_decay)`` of its
    moving average (which bound the new block scales); one or two moments. The returned function takes the
    gradient and the state leaves: where they are :class:`BlockQuantized`, it views the gradient as blocks, decodes
    the moments, calls ``leaf`` on the blocks (so the arithmetic is the dense one, in float32), and encodes the new
    moments with stochastic rounding from :func:`dither_pair` of ``seed``; a small leaf kept dense goes to ``leaf``
    unchanged.
    """

    def step(g, *state):
        if not isinstance(state[0], BlockQuantized):
            return leaf(g, *state)
        g_blocks = blocks(g, state[0].codes.shape[1])
        g_max = block_absmax(g_blocks)
        u, *new = leaf(g_blocks, *(kind.read(q) for (kind, _, _), q in zip(moments, state)))
        # one hash gives both rounding streams; the first stream alone is dither(g_blocks.shape, seed)
        noise = dither_pair(g_blocks.shape, seed)
        written = tuple(
            kind.write(m, kind.next_scale(q, g_max, decay, one_minus_decay), bits)
            for (kind, decay, one_minus_decay), q, m, bits in zip(moments, state, new, noise)
        )
        return (unblock(u, np.shape(g)), *written)

    return step


@dataclasses.dataclass(frozen=True)
class Blockwise8bit:
    r"""Opt-in 8-bit block-wise storage of optimizer moments, for ``moments=`` of :func:`gradax.adam`,
    :func:`gradax.adamw`, :func:`gradax.lion` and their ``scale_by_*``.

    Each moment array with at least ``min_size`` elements is kept as a :class:`BlockQuantized`: one uint8 code per
    element and one float32 scale per block of ``block_size`` elements, about
    :math:`(1 + 4/\text{block\_size}) / 4` of the float32 bytes (0.254 for 256). Smaller arrays (biases, norms,
    scalars) stay dense float32, as in bitsandbytes. The update itself is computed in float32 from the decoded
    moments and the new gradient; only the stored state is rounded.

    .. math::
      s_b \leftarrow \beta s_b + (1 - \beta) \max_{i \in b} |g_i| \ \ (\ge \max_{i \in b} |m_i|), \quad
      c_i = Q(m_i / s_b), \quad \tilde m_i = s_b\, Q^{-1}(c_i).

    :math:`Q` is a signed 8-bit float (sign, 4 exponent, 3 mantissa bits) for first moments and an unsigned one
    (4 exponent, 4 mantissa bits) of :math:`\sqrt{\nu}` for second moments, with stochastic rounding; see
    :mod:`gradax._quantization` for the choice and its measurements.

    Args:
      block_size: elements per block (an int >= 1); smaller blocks adapt better to outliers, larger ones use less
        memory for scales.
      min_size: arrays with fewer elements stay dense float32 (an int >= 0; 0 quantizes every floating array).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.adamw(1e-3, moments=gradax.Blockwise8bit(block_size=256, min_size=0))
      >>> state = opt.init({"w": jnp.zeros((300,))})
      >>> state[0].mu["w"].codes.shape, state[0].mu["w"].codes.dtype
      ((2, 256), dtype('uint8'))

    References:
      Dettmers, Lewis, Shleifer and Zettlemoyer, 2022, "8-bit Optimizers via Block-wise Quantization" (ICLR).
    """

    block_size: int = 256
    min_size: int = 4096

    def __post_init__(self):
        check_int("Blockwise8bit", "block_size", self.block_size, low=1)
        check_int("Blockwise8bit", "min_size", self.min_size, low=0)

    def quantizes(self, leaf: Any) -> bool:
        """Whether a parameter leaf (array or ShapeDtypeStruct) gets quantized moments."""
        dtype = jnp.dtype(leaf.dtype)
        return jnp.issubdtype(dtype, jnp.floating) and math.prod(np.shape(leaf)) >= self.min_size

    def zeros(self, leaf: Any) -> BlockQuantized:
        """The quantized zero moment of a parameter leaf."""
        size = math.prod(np.shape(leaf))
        num_blocks = -(-size // self.block_size)
        return BlockQuantized(
            jnp.zeros((num_blocks, self.block_size), jnp.uint8), jnp.zeros((num_blocks,), jnp.float32)
        )


MOMENTS_CHOICES = ("8bit",)


def resolve_moments(api: str, moments: Any, mu_dtype: Any = None, nu_dtype: Any = None) -> Blockwise8bit | None:
    """The storage of the moments asked for by ``moments=`` (None: dense), checked at construction."""
    if moments is None:
        return None
    if isinstance(moments, str) and moments in MOMENTS_CHOICES:
        moments = Blockwise8bit()
    if not isinstance(moments, Blockwise8bit):
        raise argument_error(
            api, "moments", "None, '8bit' or a gradax.Blockwise8bit", moments, "Pass moments='8bit' for 8-bit moments"
        )
    for arg, value in (("mu_dtype", mu_dtype), ("nu_dtype", nu_dtype)):
        if value is not None:
            raise argument_error(
                api, arg, "None when moments= is given", value, "Drop it: quantized moments are stored in 8 bits"
            )
    return moments


def quantized_zeros(params: Any, storage: Blockwise8bit, dense_dtype: Any = None) -> Any:
    """The initial moments of ``params``: :class:`BlockQuantized` for large floating leaves, dense zeros else."""

    def leaf(p):
        if storage.quantizes(p):
            return storage.zeros(p)
        return zeros_for(p, state_dtype(leaf_dtype(p), dense_dtype))

    return jax.tree.map(leaf, params)

"""``custom_vjp``: a forward kernel and its backward as one differentiable function.

See :func:`jaxptx.jax.custom_vjp` for the calling convention.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax

from ..dsl import Kernel
from ..errors import SpecError
from ._primitive import varying_axes

__all__ = ["custom_vjp"]


def custom_vjp(forward: Callable[..., Any], backward: Callable[..., Any] | None = None) -> Any:
    """See :func:`jaxptx.jax.custom_vjp`."""
    if backward is None:
        return lambda bwd: custom_vjp(forward, bwd)
    if not callable(forward) or not callable(backward):
        raise TypeError(f"custom_vjp: expected callables (kernels or functions), got "
                        f"{type(forward).__name__} and {type(backward).__name__}")
    return _Differentiable(forward, backward)


class _Differentiable:
    """``f(*inputs, **template)``: forward, with ``backward`` as its VJP."""

    def __init__(self, forward: Callable[..., Any], backward: Callable[..., Any]) -> None:
        self.forward = forward
        self.backward = backward
        self.__name__ = getattr(forward, "name", None) or getattr(forward, "__name__", "forward")
        self.__doc__ = getattr(forward, "__doc__", None)
        self._accepts = _accepted_keywords(backward)
        # A kernel's template defaults reach the backward like given values.
        self._defaults = {k: v for k, v in getattr(forward, "template_params", {}).items()
                          if v is not inspect.Parameter.empty}
        self._functions: dict[tuple, Callable[..., Any]] = {}

    def __call__(self, *inputs: Any, **template: Any) -> Any:
        template = {**self._defaults, **template}
        key = tuple(sorted(template.items()))
        try:
            fn = self._functions.get(key)
        except TypeError:
            raise SpecError(f"{self.__name__}: template values must be hashable, "
                            f"got {template}") from None
        if fn is None:
            fn = self._functions[key] = self._build(template)
        return fn(*inputs)

    def __repr__(self) -> str:
        return f"<jaxptx.custom_vjp {self.__name__}>"

    def _build(self, template: dict[str, Any]) -> Callable[..., Any]:
        forward = functools.partial(self.forward, **template)
        accepts = self._accepts
        bwd_kw = {k: v for k, v in template.items() if accepts is None or k in accepts}
        backward = functools.partial(self.backward, **bwd_kw)
        name = self.__name__

        @jax.custom_vjp
        def f(*inputs: Any) -> Any:
            return forward(*inputs)

        def f_fwd(*inputs: Any) -> tuple[Any, tuple]:
            out = forward(*inputs)
            return out, (inputs, _as_tuple(out))

        def f_bwd(residuals: tuple, cotangent: Any) -> tuple:
            inputs, outs = residuals
            grads = backward(*inputs, *outs, *_as_tuple(cotangent))
            grads = (grads,) if len(inputs) == 1 and not isinstance(grads, (tuple, list)) else grads
            if not isinstance(grads, (tuple, list)) or len(grads) != len(inputs):
                raise SpecError(f"custom_vjp {name}: backward must return one cotangent per "
                                f"input ({len(inputs)}), got {_describe(grads)}")
            return tuple(_match_varying(g, x) for g, x in zip(grads, inputs))

        f.defvjp(f_fwd, f_bwd)
        return f


def _match_varying(grad: Any, primal: Any) -> Any:
    """Give a cotangent the primal's varying manual axes (inside shard_map).

    An input that does not vary over an axis was broadcast to every shard,
    so its cotangent is the sum over them (psum); one that varies gets the
    shared cotangent on each shard (pcast to varying).
    """
    if grad is None:
        return None
    want, have = varying_axes(jax.typeof(primal)), varying_axes(jax.typeof(grad))
    if have - want:
        grad = jax.lax.psum(grad, tuple(sorted(have - want, key=str)))
    if want - have:
        grad = jax.lax.pcast(grad, tuple(sorted(want - have, key=str)), to="varying")
    return grad


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _describe(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"{len(x)} values"
    return "a single value"


def _accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword names ``fn`` accepts (None: any, it takes ``**kwargs``)."""
    if isinstance(fn, Kernel):
        return frozenset(fn.template_params) | frozenset(fn.dims)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))

"""Pre-training objectives, one module each, found through one registry: the stage, the loop and the card ask
:func:`get` and never branch on an objective's name (adding one: docs/architecture.md, or :func:`register`)."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The modules that declare objectives (each an ``OBJECTIVES`` tuple), in listing order.
MODULES = ("masked_lm", "electra", "sentence_pairs", "causal_lm", "permuted_lm", "span_corruption", "denoisers")
# Each paradigm's own objective: the one ``train.objective: ""`` means.
OWN = {"bert": "masked_lm", "gpt": "causal_lm", "t5": "span_corruption"}


def plain_view(model, builder):
    """The model itself as the training module; batches go as built."""
    return model, (lambda batch: batch)


def wrap(inner, forward):
    """A training module around ``inner`` (kept as its submodule ``inner``) whose call is ``forward(inner, ...)``."""
    import torch

    class View(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            return forward(self.inner, *args, **kwargs)

    return View()


def pad(ids, width: int, fill: int) -> np.ndarray:
    """``ids`` (int64) followed by ``fill`` up to ``width``."""
    out = np.full(width, fill, dtype=np.int64)
    out[: len(ids)] = ids
    return out


def tensors(**arrays) -> dict:
    """A builder's batch: each numpy array as a CPU tensor (sharing its memory), in the order given."""
    import torch

    return {name: torch.from_numpy(a) for name, a in arrays.items()}


class Builder:
    """A batch builder over ``layout``'s blocks (its objective's ``name``). What the loop reads of it: ``batched``
    (one call builds a whole micro-batch; else block by block, each with its own generator), ``needs_corpus``
    (the call also gets the whole block array), and for the FLOPs of a model without its own heads ``select``
    (the share of positions the output layer runs at) and ``targets_len`` (a decoder's target length)."""

    name: str
    batched = True
    needs_corpus = False
    select: float = 1.0
    targets_len: int | None = None

    def __init__(self, layout) -> None:
        self.layout = layout


@dataclass(frozen=True)
class BlockCheck:
    """A check the tokens gate runs on the blocks laid out for a paradigm's own objective: ``table(blocks, layout,
    sample, seed)`` gives one row per sampled training block, ``expect(layout)`` the one value each column must
    hold in every row; the gate's table is called ``name``."""

    name: str
    table: Callable[..., Any]
    expect: Callable[[Any], dict]


@dataclass(frozen=True)
class Objective:
    """What an objective declares. ``builder(layout, **settings)`` makes its batch builder from the keys of
    ``settings(train)`` it accepts (and the tokenizer's ``sentence_ends`` when asked); ``view(model, builder) ->
    (module, prepare)``; ``fused_view``: the same loss with fused kernels (the loop takes it on GPUs, :mod:`stages.training.kernels`);
    ``setup(model, layout, builder, train, init) -> FLOPs per token`` attaches its own heads;
    ``card(select, generator_size) -> str``: what the model card says the run predicts; ``shifts_labels``: the
    model predicts token t+1 from position t (held-out scores shift, perplexity reported); ``metrics``: scores its
    model outputs carry per batch (an attribute of that name), averaged over the held-out blocks as
    ``eval_<name>``; ``block_check``: what the tokens gate checks of the blocks when this is the paradigm's own
    objective (the blocks are laid out for it)."""

    name: str
    paradigm: str
    builder: Callable[..., Any]
    card: Callable[[Any, Any], str]
    settings: Callable[[Any], dict] = lambda train: {}
    sentence_ends: bool = False
    view: Callable[[Any, Any], tuple] = plain_view
    fused_view: Callable[[Any, Any], tuple] | None = None  # the same loss with fused kernels (on GPUs; same batches)
    setup: Callable[..., float] | None = None  # None: no own heads, the stock model's FLOPs (pretrain counts them)
    fixed: dict = field(default_factory=dict)  # keywords always given to ``builder`` (e.g. the NSP/SOP task)
    own_keys: tuple[str, ...] = ()  # train config keys only this objective reads (set for another: an error)
    shifts_labels: bool = False
    metrics: tuple[str, ...] = ()
    block_check: BlockCheck | None = None

    def make(self, layout, **settings):
        """The batch builder for ``layout``, given those of ``settings`` its builder takes."""
        accepted = inspect.signature(self.builder).parameters
        return self.builder(layout, **self.fixed, **{k: v for k, v in settings.items() if k in accepted})


_REGISTRY: dict[str, Objective] = {}


def register(objective: Objective) -> Objective:
    """Add ``objective`` (its name must be new)."""
    _load()
    if objective.name in _REGISTRY:
        raise ValueError(f"objective {objective.name!r} is already registered")
    _REGISTRY[objective.name] = objective
    return objective


@functools.cache
def _load() -> None:
    for module in MODULES:
        for objective in importlib.import_module(f"{__name__}.{module}").OBJECTIVES:
            _REGISTRY[objective.name] = objective


def names(paradigm: str | None = None) -> tuple[str, ...]:
    """The registered objectives (of ``paradigm``), in registration order."""
    _load()
    return tuple(n for n, o in _REGISTRY.items() if paradigm is None or o.paradigm == paradigm)


def named(name: str) -> Objective | None:
    """The objective called ``name``, whatever its paradigm; None when there is none."""
    _load()
    return _REGISTRY.get(name)


def get(paradigm: str, name: str = "") -> Objective:
    """``paradigm``'s objective called ``name`` ("" = its own); a ValueError names the choices."""
    if paradigm not in OWN:
        raise ValueError(f"paradigm: expected one of {', '.join(OWN)}, got {paradigm!r}")
    objective = named(name or OWN[paradigm])
    if objective is None or objective.paradigm != paradigm:
        raise ValueError(f"objective: {name!r} is not one of {paradigm}'s objectives ({', '.join(names(paradigm))})")
    return objective


def for_paradigm(layout, objective: str = "", **settings):
    """The batch builder of ``layout.paradigm``'s objective (its own by default) with the given settings (those
    it does not take are ignored)."""
    return get(layout.paradigm, objective).make(layout, **settings)


def training_view(model, builder, *, fused: bool = False):
    """The module the loop trains and the host step for ``builder``'s objective (:attr:`Objective.view`; with
    ``fused``, its :attr:`Objective.fused_view` where it has one)."""
    objective = named(builder.name)
    return (objective.fused_view if fused and objective.fused_view else objective.view)(model, builder)


def has_fused_view(builder) -> bool:
    """Whether ``builder``'s objective has a view with fused kernels."""
    return named(builder.name).fused_view is not None

"""The scorers ``--model`` chooses, by name: one module per architecture, registered here.

NeuMF (He et al. 2017, GMF and MLP towers into one logit, what the reference trains), a dot
product with user and item biases (Rendle et al. 2020 show a tuned one matches or beats NeuMF),
and NeuMF's two towers alone. Every one is a ``base.Architecture`` held by the same
``model.NCFModel``, trained by the same loop and strategies, and exports the same signatures.

A new architecture is its module here (a subclass of ``Architecture``), its line in
``REGISTRY`` and its test. This package imports no TensorFlow, so ``presets.ARCHITECTURES`` (the
CLI's ``--model`` choices) is read from it.
"""

from __future__ import annotations

from training_core.training.architectures.base import Architecture
from training_core.training.architectures.gmf import GMF
from training_core.training.architectures.mf import MF
from training_core.training.architectures.mlp import MLP
from training_core.training.architectures.neumf import NeuMF

# In --model's order: NeuMF, the default, first.
REGISTRY: dict[str, Architecture] = {a.name: a for a in (NeuMF(), MF(), GMF(), MLP())}


def get(name: str) -> Architecture:
    """The architecture ``name`` (a key of ``REGISTRY``).

    Raises:
        ValueError: an unknown name, naming the known ones.
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]

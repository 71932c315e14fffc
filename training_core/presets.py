"""NeuMF's configuration and its named presets: plain data, no TensorFlow.

Kept apart from ``training_core.model`` so that the CLI, ``submit`` and the pipeline compiler can
name and check presets without importing TensorFlow.
"""

from __future__ import annotations

import dataclasses

# The scorers ``--model`` chooses (``training_core.model.NCFModel``): NeuMF (He et al. 2017, GMF
# and MLP towers into one logit, what the reference trains), a dot product with user and item
# biases (Rendle et al. 2020 show a tuned one matches or beats NeuMF), and NeuMF's two towers
# alone. Every one is trained by the same loop and strategies and exports the same signatures.
ARCHITECTURES: dict[str, str] = {
    "neumf": "NeuMF: GMF and MLP towers joined in one logit",
    "mf": "matrix factorisation: dot product of the embeddings plus user and item biases",
    "gmf": "the GMF tower alone: a weighted element-wise product of the embeddings",
    "mlp": "the MLP tower alone: ReLU layers over the concatenated embeddings",
}


@dataclasses.dataclass(frozen=True)
class NeuMFConfig:
    """Model and optimizer hyperparameters.

    Attributes:
        architecture: the scorer, a key of ``ARCHITECTURES``.
        num_factors: GMF embedding width (the reference's ``num_factors``/``mf_dim``); the
            factors of ``mf``.
        layers: MLP widths; ``layers[0]`` is the concatenated user+item MLP embedding, so each
            table holds ``layers[0] // 2`` MLP columns. Must be even. ``gmf`` and ``mf`` have
            no MLP.
        batch_size: global training batch (rows per optimizer step over all replicas).
        learning_rate, beta1, beta2, epsilon: Adam.
        hr_threshold: stop once HR@10 reaches this (``None``: never stop early).
        patience: stop once this many epochs in a row bring no better HR@10, and keep the best
            epoch's weights as the model (``None``: train every epoch, keep the last).
        epochs: training epochs.
        l2_regularization: L2 penalty on the embedding rows each training example uses (its
            user's and its item's), ``l2 * (|u|^2 + |v|^2)`` per example, averaged over the
            batch like the loss; 0: none. Only the rows a step touches are penalised, so it
            works with touched-rows (sparse) updates (Rendle et al. 2020 tune exactly this
            for the dot-product model).
    """

    architecture: str = "neumf"
    num_factors: int = 8
    layers: tuple[int, ...] = (64, 32, 16, 8)
    batch_size: int = 1024
    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    hr_threshold: float | None = None
    patience: int | None = None
    epochs: int = 2
    l2_regularization: float = 0.0

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"unknown model {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
            )
        if not self.layers or self.layers[0] % 2:
            raise ValueError(f"layers[0] must be even (split between user and item): {self.layers}")
        if self.num_factors < 1 or self.batch_size < 1 or self.epochs < 1:
            raise ValueError("num_factors, batch_size and epochs must be positive")
        if not self.l2_regularization >= 0:
            raise ValueError(f"l2_regularization must be >= 0, got {self.l2_regularization}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 (None: never), got {self.patience}")

    @property
    def uses_gmf(self) -> bool:
        """Whether the tables hold GMF columns (``num_factors`` of them)."""
        return self.architecture in ("neumf", "gmf")

    @property
    def uses_mlp(self) -> bool:
        """Whether the tables hold MLP columns (``layers[0] // 2``) and the model an MLP."""
        return self.architecture in ("neumf", "mlp")

    @property
    def embedding_dim(self) -> int:
        """Width of each embedding table (``mf``: the factors and one bias column)."""
        if self.architecture == "mf":
            return self.num_factors + 1
        return self.num_factors * self.uses_gmf + (self.layers[0] // 2) * self.uses_mlp


# The ml-20m settings are the reference's MLPerf v0.5 run (tensorflow/models
# official/recommendation/run.sh and ncf_keras_benchmark.py): batch 98304, Adam lr 0.00382059,
# beta1 0.783529, beta2 0.909003, epsilon 1.45439e-07, layers 256,256,128,64, 64 factors,
# target HR@10 0.635, 14 epochs. The reference publishes no separate ml-1m tuning; its README runs
# ml-1m with the same model, so ml-1m keeps those hyperparameters at the batch used by the
# reference's speed benchmarks (1024) and fewer epochs. ml-100k was tuned with `ncf-pipelines
# tune` on synthetic data as hard as real MovieLens-100k (`synth --structure movielens`,
# docs/training.md 'Tuning'), at batch 1024: the first tunes capped the GMF width at 64 and
# found 64 factors, MLP 128,64,32, lr 0.0021 (mean best HR@10 0.2602 over seeds 0, 1, 2 against
# the ml-1m values' 0.2439); widening the space found the embedding width is what matters (a
# dot product of 256 factors 0.3616; NeuMF with 256 GMF factors, lr 0.006, L2 1e-5: 0.3340,
# 0.3309, 0.3181, mean 0.3277). At the ml-1m shape those values did not beat the ml-1m preset
# (0.1985 against 0.2033 after 10 epochs), so each keeps its own and "auto" picks by size.
#
# A preset's batch_size is the batch it was chosen for; a run trains at the prepared data's
# pre-batch size unless --batch-size says otherwise (train_config.config_for), so prepare with
# --train-batch-size to match it (the ml-20m preset's 98304, MLPerf's).
#
# ml-20m also stops after 3 epochs without a better HR@10 and keeps the best epoch's weights. A tune
# at the ml-20m shape on MovieLens-like data (research/gpu_tune_jax.py on an H100: this project's
# data prep and training step, docs/training.md 'ml-20m on a GPU') found MLPerf's values at their
# best after 3 epochs (HR@10 0.4465 and 0.4478, seeds 0 and 1) and falling to 0.4179 by the 14th,
# the model a run used to leave; no width (64, 128, 256), learning rate (x0.25 to x2) or L2 (up
# to 1e-4) changed the peak by more than 0.007, so MLPerf's values stay and patience keeps the
# peak (where HR@10 keeps rising, as MLPerf reports on the real ml-20m, it never triggers).
PATIENCE_ML20M = 3
_MLPERF_ADAM = dict(learning_rate=0.00382059, beta1=0.783529, beta2=0.909003, epsilon=1.45439e-07)

PRESETS: dict[str, NeuMFConfig] = {
    # The reference's flag defaults (ncf_common.define_ncf_flags: 8 factors, layers 64,32,16,8,
    # Adam 0.001/0.9/0.999/1e-8) at batch 1024: what its CPU speed benchmark runs.
    "reference": NeuMFConfig(batch_size=1024, epochs=2),
    "tiny": NeuMFConfig(
        num_factors=8, layers=(16, 16, 8), batch_size=256, learning_rate=0.01, epochs=3
    ),
    # A small model that learns in a few epochs (the former ml-100k preset): what run-local
    # trains on the embedded sample, and a fast first run on any small set. Below the default
    # after 20 epochs on ml-100k-shaped data, above it after 4 (run-local: HR@10 0.278 against
    # 0.255).
    "quick": NeuMFConfig(
        num_factors=16, layers=(64, 32, 16), batch_size=256, learning_rate=0.002, epochs=10
    ),
    "ml-100k": NeuMFConfig(
        num_factors=256,
        layers=(128, 64, 32),
        batch_size=1024,
        learning_rate=0.006,
        beta1=_MLPERF_ADAM["beta1"],
        beta2=_MLPERF_ADAM["beta2"],
        epsilon=_MLPERF_ADAM["epsilon"],
        epochs=20,
        l2_regularization=1e-5,
    ),
    "ml-1m": NeuMFConfig(
        num_factors=64,
        layers=(256, 256, 128, 64),
        batch_size=1024,
        hr_threshold=0.635,
        # 20, as the NCF paper's own code: at the ml-1m shape HR@10 still rises after epoch 10
        # (docs/training.md 'ml-1m trains 20 epochs').
        epochs=20,
        **_MLPERF_ADAM,
    ),
    "ml-20m": NeuMFConfig(
        num_factors=64,
        layers=(256, 256, 128, 64),
        batch_size=98304,
        hr_threshold=0.635,
        patience=PATIENCE_ML20M,
        epochs=14,
        **_MLPERF_ADAM,
    ),
}


# The default preset: the one tuned for the MovieLens size nearest the prepared data's, by its
# training positives (the limits are the geometric midpoints of 100k, 1M and 20M ratings).
AUTO = "auto"
AUTO_BY_SIZE: tuple[tuple[int, str], ...] = ((316_228, "ml-100k"), (4_472_136, "ml-1m"))
AUTO_LARGEST = "ml-20m"
# Every name --preset takes.
PRESET_NAMES: tuple[str, ...] = (AUTO, *PRESETS)


def resolve_preset(name: str, num_train_positives: int) -> str:
    """The preset ``name`` stands for on data of ``num_train_positives`` (``auto``: by size)."""
    if name != AUTO:
        return name
    for limit, preset in AUTO_BY_SIZE:
        if num_train_positives <= limit:
            return preset
    return AUTO_LARGEST


def possible_presets(name: str) -> tuple[str, ...]:
    """Every preset ``name`` may resolve to, whatever the data's size."""
    return (*(p for _, p in AUTO_BY_SIZE), AUTO_LARGEST) if name == AUTO else (name,)


def training_epochs(preset: str, epochs: int | None, num_train_positives: int) -> int:
    """The epochs a run trains on data of ``num_train_positives``: ``epochs``, else the preset's.

    What training resolves (``train_config.config_for``), known to data prep before the data is
    written, so that it prepares one epoch of fresh negatives for each epoch trained.
    """
    return get_preset(resolve_preset(preset, num_train_positives), epochs=epochs).epochs


def get_preset(name: str, **overrides) -> NeuMFConfig:
    """A named preset, optionally with fields replaced (``None`` overrides are ignored)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(PRESETS[name], **overrides)

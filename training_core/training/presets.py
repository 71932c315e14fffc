"""NeuMF's configuration and its named presets: plain data, no TensorFlow.

Kept apart from ``training_core.training.model`` so that the CLI, ``submit`` and the pipeline
compiler can name and check presets without importing TensorFlow.
"""

from __future__ import annotations

import dataclasses

from training_core.training import architectures

# The scorers ``--model`` chooses and a line on each (``training_core.training.architectures``).
ARCHITECTURES: dict[str, str] = {
    name: architecture.description for name, architecture in architectures.REGISTRY.items()
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
        architecture = architectures.get(self.architecture)  # Refuses an unknown one.
        if not self.layers or self.layers[0] % 2:
            raise ValueError(f"layers[0] must be even (split between user and item): {self.layers}")
        if self.num_factors < 1 or self.batch_size < 1 or self.epochs < 1:
            raise ValueError("num_factors, batch_size and epochs must be positive")
        if not self.l2_regularization >= 0:
            raise ValueError(f"l2_regularization must be >= 0, got {self.l2_regularization}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 (None: never), got {self.patience}")
        architecture.check(self)

    @property
    def embedding_dim(self) -> int:
        """Width of each embedding table (the architecture's: ``mf``'s holds a bias column)."""
        return architectures.get(self.architecture).embedding_dim(self)


# ml-20m and ml-1m take the reference's MLPerf v0.5 settings (tensorflow/models
# official/recommendation/run.sh and ncf_keras_benchmark.py): batch 98304, Adam lr 0.00382059,
# beta1 0.783529, beta2 0.909003, epsilon 1.45439e-07, layers 256,256,128,64, 64 factors,
# target HR@10 0.635, 14 epochs. The reference publishes no ml-1m tuning, so ml-1m keeps them at
# the batch of its speed benchmarks (1024). ml-100k has its own values (wide embeddings, a small
# L2), tuned with `ncf-pipelines tune` on synthetic data as hard as real MovieLens-100k: they win
# at that size and not at ml-1m's, so each size keeps its own and "auto" picks by size. How each
# was chosen: docs/tuning-log.md.
#
# A preset's batch_size is the batch it was chosen for; a run trains at the prepared data's
# pre-batch size unless --batch-size says otherwise (train_config.config_for), so prepare with
# --train-batch-size to match it (the ml-20m preset's 98304, MLPerf's).
#
# ml-20m also stops after 3 epochs without a better HR@10 and keeps the best epoch's weights:
# on MovieLens-like data at that shape MLPerf's values peak by epoch 3 and then fall, and no
# other width, learning rate or L2 moved the peak much; where HR@10 keeps rising, patience
# never triggers. See docs/tuning-log.md#ml-20m-on-a-gpu-patience-not-new-values.
PATIENCE_ML20M = 3
# ml-100k keeps its best validation epoch (HR@10 still rises at epoch 20 on real MovieLens-100k,
# with dips of one or two epochs).
PATIENCE_ML100K = 4
_MLPERF_ADAM = dict(learning_rate=0.00382059, beta1=0.783529, beta2=0.909003, epsilon=1.45439e-07)

PRESETS: dict[str, NeuMFConfig] = {
    # The reference's flag defaults (ncf_common.define_ncf_flags: 8 factors, layers 64,32,16,8,
    # Adam 0.001/0.9/0.999/1e-8) at batch 1024: what its CPU speed benchmark runs.
    "reference": NeuMFConfig(batch_size=1024, epochs=2),
    "tiny": NeuMFConfig(
        num_factors=8, layers=(16, 16, 8), batch_size=256, learning_rate=0.01, epochs=3
    ),
    # A small model that learns in a few epochs (the former ml-100k preset): what run-local
    # trains on the embedded sample, and a fast first run on any small set: ahead of a bigger
    # model after 4 epochs, behind it after 20
    # (docs/tuning-log.md before issue 52, git 3f8ddb6).
    "quick": NeuMFConfig(
        num_factors=16, layers=(64, 32, 16), batch_size=256, learning_rate=0.002, epochs=10
    ),
    # Re-decided on real MovieLens-100k under the honest protocol (held-out items drawable as
    # training negatives, a validation split choosing, the test split scored once):
    # docs/tuning-log.md#honest-numbers-on-real-movielens-100k-issue-52. The dot product (mf)
    # with a learning rate of 0.001 (0.006 before: it peaked at epoch 3 and overfit) and L2 1e-4
    # has the best validation HR@10 of the settings tried; patience keeps the best epoch.
    "ml-100k": NeuMFConfig(
        architecture="mf",
        patience=PATIENCE_ML100K,
        num_factors=256,
        layers=(128, 64, 32),
        batch_size=1024,
        learning_rate=0.001,
        beta1=_MLPERF_ADAM["beta1"],
        beta2=_MLPERF_ADAM["beta2"],
        epsilon=_MLPERF_ADAM["epsilon"],
        epochs=20,
        l2_regularization=1e-4,
    ),
    "ml-1m": NeuMFConfig(
        num_factors=64,
        layers=(256, 256, 128, 64),
        batch_size=1024,
        hr_threshold=0.635,
        # 20, as the NCF paper's own code: at the ml-1m shape HR@10 still rises after epoch 10
        # (docs/tuning-log.md before issue 52, git 3f8ddb6).
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

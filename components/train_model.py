"""KFP components ``train_model`` (NeuMF training on ``examples``) and ``refit_model`` (a refit).

Both run ``loop.train_step`` (the config, the strategy, the run) and publish what
``loop.step_outputs`` gives: the metrics, the curve page and the model's metadata.
"""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def train_model(
    examples: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    plots: Output[HTML],
    preset: str = "auto",
    architecture: str = "",
    epochs: int = 0,
    batch_size: int = 0,
    seed: int = 0,
    distribution_strategy: str = "auto",
    tpu_address: str = "",
    expect_accelerator: str = "",
    expect_accelerator_count: int = 0,
    checkpoint_every_steps: int = 0,
    target_hr: float = 0.0,
    patience: int = 0,
    learning_rate: float = 0.0,
    l2_regularization: float = 0.0,
    num_factors: int = 0,
    mlp_layers: str = "",
    warm_start_uri: str = "",
):
    """Trains NeuMF (training_core.training.loop); ``model`` holds checkpoints, model_config.json.

    The training options are ``training_core.training.train_config.TrainOptions``'s, with its
    defaults (a test holds them equal); 0 is "not set" (training_core.common.not_set): the preset's
    epochs and target and model architecture (``architecture``: neumf, mf, gmf or mlp, the CLI's
    ``--model``), the data's pre-batch size, the preset's ``learning_rate``, ``l2_regularization``,
    ``num_factors`` and ``mlp_layers`` ("256,128,64"; what a tuning job found, in the pipeline).
    A negative ``target_hr`` never stops early (nor by the preset's ``patience``); ``patience``
    0 is the preset's, a negative one never. Metrics get
    the HR@10, NDCG@10, loss and examples/s of the epoch the model is (the last; with patience
    the best), measured on the data's validation split and named ``validation_*``
    (``best_validation_hr_at_10``), and the test split's, scored once on the final model, as
    ``test_*``; data without a validation split gives the unprefixed names of the test split, as
    before (``loop.summary_metrics``). ``plots`` charts them per epoch.
    ``distribution_strategy`` is the tf.distribute strategy (not named ``strategy``: the Vertex
    AI custom-job wrapper owns that input, the job's scheduling strategy).
    ``expect_accelerator``/``expect_accelerator_count`` (the profile's accelerator) make the step
    fail with a clear message when the accelerator is not visible, instead of training on the
    CPU. On a multi-worker job only the chief writes ``metrics`` and ``plots``.
    ``warm_start_uri``: the champion to start from (its export, the registry's ``champion_uri``;
    the CLI's ``--warm-start-from``, docs/weekly-runs.md); "" trains cold.
    """
    parameters = dict(locals())
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(model.path, metrics.path, plots.path)  # /gcs writable? docs/submit.md
    from training_core.training import loop

    config, result = loop.train_step(examples.path, model.path, parameters)
    if not result.is_chief:
        return  # Only the chief publishes: the /gcs/ mount takes one writer per file.
    summary, page, facts = loop.step_outputs(config, result)
    for key, value in summary.items():
        metrics.log_metric(key, value)
    with open(plots.path, "w") as f:
        f.write(page)
    model.metadata.update(facts)


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def refit_model(
    examples: Input[Dataset],
    evaluated_model: Input[Model],
    model: Output[Model],
    metrics: Output[Metrics],
    plots: Output[HTML],
    seed: int = 0,
    distribution_strategy: str = "auto",
    tpu_address: str = "",
    expect_accelerator: str = "",
    expect_accelerator_count: int = 0,
    checkpoint_every_steps: int = 0,
    warm_start_uri: str = "",
):
    """Trains ``evaluated_model``'s configuration again on every interaction (a refit).

    ``examples`` were prepared with ``refit`` from the evaluated run's raw data and options; the
    run takes that model's hyperparameters and the epochs it kept (the CLI's ``train
    --refit-of``; docs/training.md, "Refit") and evaluates nothing: metrics are ``refit`` 1 and
    the run's loss, epochs and speed. The other parameters are ``train_model``'s; a held-out
    run that was warm-started is refit from the same ``warm_start_uri`` (its epochs were chosen
    for that start).
    """
    parameters = dict(locals())
    parameters["refit_of"] = evaluated_model.path
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(model.path, metrics.path, plots.path)  # /gcs writable? docs/submit.md
    from training_core.training import loop

    config, result = loop.train_step(examples.path, model.path, parameters)
    if not result.is_chief:
        return  # Only the chief publishes: the /gcs/ mount takes one writer per file.
    summary, page, facts = loop.step_outputs(config, result)
    for key, value in summary.items():
        metrics.log_metric(key, value)
    with open(plots.path, "w") as f:
        f.write(page)
    model.metadata.update(facts)

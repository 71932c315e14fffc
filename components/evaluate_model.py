"""KFP component ``evaluate_model``: HR@10/NDCG@10 of a trained ``model`` on ``examples``."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def evaluate_model(
    examples: Input[Dataset],
    model: Input[Model],
    metrics: Output[Metrics],
    strategy: str = "default",
    full_catalog_users: int = 10_000,
):
    """Restores the model's latest checkpoint (any strategy wrote it) and evaluates it.

    ``metrics`` gets the test split's HR@10/NDCG@10 against the sampled negatives and, as
    ``full_catalog_*``, against every item the user had not interacted with before, for
    ``full_catalog_users`` users (a fixed-seed sample; 0: every user; ``full_catalog_capped`` is
    1 when that was not all of them), the popularity baseline's as ``popularity_*`` and
    ``beats_popularity`` (1 when the model's HR@10 is above the baseline's); where the data has
    a validation split, the same for it prefixed ``validation_`` (``EvalResult.metrics``). The
    options are ``training_core.evaluation.eval_config.EvalOptions``'s, with its defaults (a test
    holds them equal).
    """
    parameters = dict(locals())
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(metrics.path)  # /gcs writable? docs/submit.md
    from training_core.common import faults
    from training_core.evaluation import eval_config, evaluate
    from training_core.training import strategy as st

    options = eval_config.from_parameters(parameters)
    dist = st.build_strategy(st.StrategyConfig(name=strategy))
    with faults.reported():  # A full disk or too little memory: one paragraph.
        result = evaluate.evaluate(examples.path, model.path, dist, options=options)
    for key, value in result.metrics().items():
        metrics.log_metric(key, int(value) if isinstance(value, bool) else value)

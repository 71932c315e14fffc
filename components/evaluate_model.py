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
):
    """Restores the model's latest checkpoint (any strategy wrote it) and evaluates it."""
    from training_core import evaluate
    from training_core import strategy as st

    dist = st.build_strategy(st.StrategyConfig(name=strategy))
    result = evaluate.evaluate(examples.path, model.path, dist)
    metrics.log_metric("hr_at_10", result.hr_at_10)
    metrics.log_metric("ndcg_at_10", result.ndcg_at_10)
    metrics.log_metric("eval_users", result.eval_users)
    metrics.log_metric("step", result.step)

"""Adam and dynamic loss scaling as small ``tf.Module`` s that work under any strategy.

Updates run in cross-replica context (``merge_call`` then ``strategy.extended.update``), the way
Keras' optimizers apply already all-reduced gradients, so the same code serves one device,
mirrored replicas, workers and TPUs. With several replicas on one machine the gradients arrive as
per-replica values (each replica's copy of the sum) and ``update`` applies each to its device's
copy of the variable and of its moments, so every copy takes the same step. Embedding gradients
can be applied densely (exact Adam over the whole table, the reference's choice, fastest on
accelerators) or to the touched rows only (lazy Adam, far cheaper on CPU where the tables dwarf a
batch).
"""

from __future__ import annotations

import tensorflow as tf


class Adam(tf.Module):
    """Adam with the ``epsilon``-hat update of the reference (TF1/Keras ``Adam``)."""

    def __init__(
        self,
        variables: list[tf.Variable],
        learning_rate: float,
        beta1: float,
        beta2: float,
        epsilon: float,
    ):
        super().__init__(name="adam")
        self.learning_rate = learning_rate
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.iterations = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="iterations",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        self.m = [tf.Variable(tf.zeros(v.shape), trainable=False, name="m") for v in variables]
        self.v = [tf.Variable(tf.zeros(v.shape), trainable=False, name="v") for v in variables]

    def apply(self, strategy: tf.distribute.Strategy, grads, variables) -> None:
        """Applies summed gradients; call in cross-replica context (inside ``merge_call``).

        Each gradient is a tensor or ``tf.IndexedSlices``, or per-replica values of them (the
        same sum on every replica) where one machine holds several replicas.
        """
        # The step's scalars are computed once here, not per variable: on CPU each small op
        # costs more in dispatch than in arithmetic, and there are a dozen variables.
        t = tf.cast(self.iterations + 1, tf.float32)
        beta1_power = tf.pow(self.beta1, t)
        beta2_power = tf.pow(self.beta2, t)
        scalars = (beta1_power, beta2_power)
        local = [strategy.experimental_local_results(g)[0] for g in grads]
        if any(isinstance(g, tf.IndexedSlices) for g in local):
            lr = self.learning_rate * tf.sqrt(1.0 - beta2_power) / (1.0 - beta1_power)
            scalars += (lr,)
        for g, var, m, v in zip(grads, variables, self.m, self.v, strict=True):
            strategy.extended.update(var, self._update, args=(g, m, v, *scalars), group=False)
        self.iterations.assign_add(1)

    def _update(self, var, g, m, v, beta1_power, beta2_power, lr=None):
        # One device's update: ``var`` is that device's copy; ``m`` and ``v`` resolve to theirs
        # inside ``strategy.extended.update``.
        b1, b2, eps = self.beta1, self.beta2, self.epsilon
        if isinstance(g, tf.IndexedSlices):
            # Lazy Adam: only the rows in the batch move. Duplicate ids (within a replica's batch
            # and across replicas: their slices are concatenated) are summed first.
            rows, pos = tf.unique(g.indices)
            values = tf.math.unsorted_segment_sum(g.values, pos, tf.size(rows))
            m_rows = b1 * tf.gather(m, rows) + (1.0 - b1) * values
            v_rows = b2 * tf.gather(v, rows) + (1.0 - b2) * tf.square(values)
            m.scatter_update(tf.IndexedSlices(m_rows, rows))
            v.scatter_update(tf.IndexedSlices(v_rows, rows))
            return var.scatter_sub(tf.IndexedSlices(lr * m_rows / (tf.sqrt(v_rows) + eps), rows))
        # One fused, multi-threaded kernel for the three dense updates (same formula as above).
        return tf.raw_ops.ResourceApplyAdam(
            var=var.handle,
            m=m.handle,
            v=v.handle,
            beta1_power=beta1_power,
            beta2_power=beta2_power,
            lr=self.learning_rate,
            beta1=b1,
            beta2=b2,
            epsilon=eps,
            grad=g,
            use_locking=False,
        )


class DynamicLossScale(tf.Module):
    """float16 loss scaling: halve on overflow (and skip the step), double after 2000 good steps."""

    def __init__(self, initial: float = 2.0**15, growth_interval: int = 2000):
        super().__init__(name="loss_scale")
        self.growth_interval = growth_interval
        agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.scale = tf.Variable(initial, trainable=False, name="scale", aggregation=agg)
        self.good_steps = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="good_steps", aggregation=agg
        )

    def update(self, finite: tf.Tensor) -> None:
        """Adjusts the scale after a step; call in cross-replica context.

        ``finite`` is one boolean for all replicas (not a per-replica value): every copy of the
        scale must move alike.
        """
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.growth_interval)
        new_scale = tf.where(
            finite, tf.where(grow, self.scale * 2.0, self.scale), tf.maximum(self.scale / 2.0, 1.0)
        )
        self.scale.assign(new_scale)
        self.good_steps.assign(
            tf.where(tf.logical_and(finite, tf.logical_not(grow)), self.good_steps + 1, 0)
        )

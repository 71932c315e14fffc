"""The training step, compiled: forward and backward pass, cross-replica gradient sum, Adam.

(Not ``loop.train_step``, the training component's whole run.)

``make_train_loop`` builds the ``tf.function`` the trainer calls once per host call: it runs ``n``
steps on a distributed iterator and returns the summed loss. Each step computes the
sigmoid cross-entropy of the batch (normalized by the global batch, so the replicas' losses sum to
the batch mean), sums the gradients across replicas, and applies them in cross-replica context.
Under float16 the loss is scaled by a ``DynamicLossScale``: a step whose gradients overflow is
skipped (no weight, moment or Adam step count moves) and the scale adjusts.

Everything that reads gradient values (the unscaling and the overflow check) runs in replica
context, on each replica's copy of the summed gradients; ``merge_call`` then sees per-replica
values wherever one machine holds several replicas (``MirroredStrategy`` over several GPUs), and
only passes them on to ``strategy.extended.update``, which applies each device's copy of the
gradients to that device's copy of the variables.
"""

from __future__ import annotations

import tensorflow as tf

from training_core.training.model import NeuMF
from training_core.training.optim import Adam, DynamicLossScale


def make_train_loop(
    strategy: tf.distribute.Strategy,
    model: NeuMF,
    variables: list[tf.Variable],
    optimizer: Adam,
    loss_scale: DynamicLossScale | None,
    step: tf.Variable,
    *,
    global_batch: int,
    dtype: tf.DType,
    dense: bool,
    jit: bool,
):
    """A ``tf.function`` ``train_loop(iterator, n)``: ``n`` steps; returns their summed loss.

    Args:
        strategy: the ``tf.distribute`` strategy the variables were created under.
        model: the model to train.
        variables: the trained variables, in the optimizer's order.
        optimizer: applies the summed gradients.
        loss_scale: the float16 loss scale; ``None`` for no loss scaling.
        step: the global step, incremented once per step.
        global_batch: examples per step across all replicas (the loss's denominator).
        dtype: the compute dtype.
        dense: convert the embedding gradients to dense tensors (exact Adam) rather than keep
            them as ``tf.IndexedSlices`` (touched rows only).
        jit: XLA-compile the forward and backward pass (dense gradients only).
    """
    plain_step = make_replica_step(
        strategy,
        model,
        variables,
        optimizer,
        loss_scale,
        global_batch=global_batch,
        dtype=dtype,
        dense=dense,
        jit=jit,
    )

    @tf.function(autograph=False)
    def train_loop(iterator, n):
        def body(total):
            per_replica = strategy.run(plain_step, args=(next(iterator),))
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            step.assign_add(1)
            return (total,)

        return repeat(n, body, (tf.constant(0.0, tf.float32),))[0]

    return train_loop


def make_replica_step(
    strategy: tf.distribute.Strategy,
    model: NeuMF,
    variables: list[tf.Variable],
    optimizer: Adam,
    loss_scale: DynamicLossScale | None,
    *,
    global_batch: int,
    dtype: tf.DType,
    dense: bool,
    jit: bool,
):
    """One replica's step ``step_fn(features) -> loss``: what ``strategy.run`` runs per step.

    Under ``TPUStrategy`` this whole function is compiled by XLA (tests/xla_step.py compiles it
    the same way on the CPU). The arguments are ``make_train_loop``'s.
    """
    loss_and_grads = _loss_and_grads_fn(
        model, variables, loss_scale, float(global_batch), dtype, dense
    )
    if jit:
        # XLA fuses the forward and backward pass (dense gradients only: XLA has no
        # IndexedSlices). Replica-context collectives stay outside the compiled function.
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True, autograph=False)
    apply = _apply_fn(optimizer, loss_scale, variables)

    def step_fn(features):
        loss, grads = loss_and_grads(features)
        ctx = tf.distribute.get_replica_context()
        if strategy.num_replicas_in_sync > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if loss_scale is None:
            ctx.merge_call(apply, args=(grads,))
        else:
            grads, finite = _unscale(grads, loss_scale.scale)
            ctx.merge_call(apply, args=(grads, finite))
        return loss

    # Plain graph code (no tensor-dependent Python control flow): AutoGraph's conversion of the
    # model's and optimizer's code took seconds per trace.
    return tf.autograph.experimental.do_not_convert(step_fn)


def repeat(n, body, state: tuple) -> tuple:
    """``state`` after ``n`` calls of ``state = body(*state)``, as one ``tf.while_loop``.

    What AutoGraph makes of ``for _ in tf.range(n)``, written out so that nothing is converted
    (its conversion of a step loop took up to a second per trace): call it inside a
    ``tf.function(autograph=False)``. ``body`` returns the new state as a tuple.
    """
    n = tf.convert_to_tensor(n)

    def step(i, *values):
        return (i + 1, *body(*values))

    return tuple(tf.while_loop(lambda i, *_: i < n, step, (tf.constant(0, n.dtype), *state))[1:])


def _loss_and_grads_fn(
    model: NeuMF,
    variables: list[tf.Variable],
    loss_scale: DynamicLossScale | None,
    global_batch: float,
    dtype: tf.DType,
    dense: bool,
):
    """One replica's ``loss_and_grads(features) -> (loss, grads)``; grads of the scaled loss."""
    l2 = model.config.l2_regularization

    def loss_and_grads(features):
        with tf.GradientTape() as tape:
            logits = model.score(features["user_id"], features["item_id"], dtype)
            labels = tf.cast(features["labels"], tf.float32)
            weights = tf.cast(features["valid_point_mask"], tf.float32)
            per_row = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            if l2 > 0:  # The rows this step uses (NeuMFConfig.l2_regularization).
                per_row += l2 * tf.reshape(
                    _squared_norms(model.user_embedding, features["user_id"])
                    + _squared_norms(model.item_embedding, features["item_id"]),
                    tf.shape(per_row),
                )
            # Normalized by the global batch, so summing replicas gives the batch mean.
            loss = tf.reduce_sum(per_row * weights) / global_batch
            scaled = loss * loss_scale.scale if loss_scale is not None else loss
        grads = tape.gradient(scaled, variables)
        if dense:
            grads = [tf.convert_to_tensor(g) for g in grads]
        return loss, grads

    return loss_and_grads


def _squared_norms(table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
    """``|row|^2`` of each id's row, float32, ``[n]``; a gather, so only those rows get gradient."""
    rows = tf.gather(table, tf.reshape(ids, [-1]))
    return tf.reduce_sum(tf.square(tf.cast(rows, tf.float32)), axis=1)


def _unscale(grads: list, scale: tf.Variable) -> tuple[list, tf.Tensor]:
    """Replica context: the gradients divided by the loss scale, and whether all are finite.

    Called on the gradients already summed over the replicas, so every replica computes the
    same flag (a replica whose own gradients overflowed made the sum overflow everywhere).
    """
    inv = 1.0 / scale
    grads = [
        g * inv
        if not isinstance(g, tf.IndexedSlices)
        else tf.IndexedSlices(g.values * inv, g.indices, g.dense_shape)
        for g in grads
    ]
    finite = tf.reduce_all(
        [
            tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
            for g in grads
        ]
    )
    return grads, finite


def _apply_fn(optimizer: Adam, loss_scale: DynamicLossScale | None, variables: list[tf.Variable]):
    """The cross-replica ``apply(distribution, grads[, finite])``; skips a non-finite step.

    ``grads`` (unscaled) and ``finite`` come from ``_unscale`` on each replica; with several
    replicas on this machine they arrive as per-replica values. The flags are combined into one,
    so every local copy of every variable takes the step or every one skips it.
    """

    def apply(distribution, grads, finite=None):
        if loss_scale is None:
            optimizer.apply(distribution, grads, variables)
            return
        finite = _all_replicas(distribution, finite)

        def do_apply():
            optimizer.apply(distribution, grads, variables)

        tf.cond(finite, do_apply, lambda: None)
        loss_scale.update(finite)

    return apply


def _all_replicas(distribution: tf.distribute.Strategy, flag) -> tf.Tensor:
    """Cross-replica context: one boolean, true when the flag is true on every local replica.

    Other workers' flags need no collective: theirs come from the same all-reduced gradients.
    """
    flags = distribution.experimental_local_results(flag)
    return flags[0] if len(flags) == 1 else tf.reduce_all(tf.stack(flags))

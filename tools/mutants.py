"""Mutation check of the core's decision rules (``make mutants``; docs/testing.md).

Each mutant below is one plausible bug in one line (or a few) of product code: a comparison
flipped, an off-by-one, a rule dropped, two steps swapped. The tool applies each mutant alone in a
private copy of the working tree (never in the checkout itself), runs the tests that claim to
cover it, and records whether they failed (``killed``: the tests hold that line) or passed
(``survived``: the line could break unnoticed). A survivor is acceptable only when its mutant says
why (``accepted``); any other survivor, a mutant whose text is no longer in its file, or tests
that fail on the unmutated tree make the check fail.

    python tools/mutants.py               # every mutant: a table, exit 0 or 1
    python tools/mutants.py --list        # the mutants, their files and tests; nothing run
    python tools/mutants.py --only gate-strict auto-counts-rows
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TIMEOUT_S = 300  # Per mutant: its tests, in one pytest process.

KILLED, SURVIVED, TIMEOUT, ERROR = "killed", "survived", "timeout", "error"


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One bug: ``original`` (exactly once in ``file``) replaced by ``replacement``.

    ``tests`` are the pytest node ids that claim to catch it; ``accepted`` says why the mutant may
    survive them (None: it must be killed).
    """

    id: str
    file: str
    original: str
    replacement: str
    breaks: str
    tests: tuple[str, ...]
    accepted: str | None = None


_DECISIONS = "tests/test_decisions.py::"
_METRICS = "tests/test_train_metrics.py::"
_CATALOG = "tests/test_full_catalog.py::"
_SAMPLING = "tests/test_sampling.py::"
_PROFILES = "tests/test_profiles.py::"
_RULES = "tests/test_request_rules.py::"
_GAPS = "tests/test_mutant_gaps.py::"
_SUBMIT = _RULES + "test_submit_refuses_each_bad_field_naming_it[%s]"
_JOB = _RULES + "test_each_custom_job_rule_refuses_naming_the_field[%s]"
_TRAIN, _COMPARE = "training_core/training/trainer.py", "training_core/evaluation/gate.py"
_RESULTS = "training_core/training/results.py"
_SAMPLER = "training_core/data/sampling.py"
_PREFLIGHT, _SUBMIT_PY = "pipelines/profiles.py", "pipelines/submit/request.py"
_CUSTOM_JOB = "pipelines/run_plan/custom_job.py"
_IN_LOOP = " " * 16  # The epoch loop's indent in training/trainer.py.
_BEST_SAVED = (
    f"{_IN_LOOP}if patience is not None and best_epoch(history) is result:\n"
    f"{_IN_LOOP}    self._save_best(result.epoch)  # Before the epoch's checkpoint: see above.\n"
)
_KILL = "test_a_kill_right_after_an_epoch_s_checkpoint_finds_its_best_weights_saved"
_CANDIDATE = (
    "candidate = tf.logical_and(tf.logical_not(excluded), items[None, :] != positives[:, None])"
)
_TIES = "test_of_equal_hr_at_10_the_first_epoch_is_the_best_and_a_later_tie_counts_as_no_better"
_GATE = "test_the_gate_blesses_up_to_the_tolerance_inclusive_on_the_selection_split"
_AUTO = "test_auto_prepares_the_epochs_of_the_preset_its_training_positives_choose"
_CATALOGUE = _PROFILES + "test_catalogue_has_every_required_profile_and_each_passes_preflight"
_IMPOSSIBLE = _PROFILES + "test_preflight_rejects_impossible_combinations_with_a_fix"

MUTANTS: tuple[Mutant, ...] = (
    # --- training: the best epoch, patience, the target ------------------------------------------
    Mutant(
        "best-epoch-last-of-equals", _RESULTS,
        "return max(history, key=lambda e: e.hr_at_10) if history else None",
        "return max(reversed(history), key=lambda e: e.hr_at_10) if history else None",
        "of equal HR@10 the last epoch is the best", (_DECISIONS + _TIES,),
    ),
    Mutant(
        "patience-one-late", _RESULTS,
        "epochs_without_better(history) >= model.patience",
        "epochs_without_better(history) > model.patience",
        "patience stops one epoch late", (_DECISIONS + _TIES,),
    ),
    Mutant(
        "epochs-since-best-off-by-one", _RESULTS,
        "return history[-1].epoch - best.epoch if best else 0",
        "return history[-1].epoch - best.epoch + 1 if best else 0",
        "the best epoch itself counts as one without better", (_DECISIONS + _TIES,),
    ),
    Mutant(
        "target-hr-strict", _RESULTS,
        "if target is not None and last.hr_at_10 >= target:",
        "if target is not None and last.hr_at_10 > target:",
        "reaching the target HR@10 exactly does not stop",
        (_GAPS + "test_reaching_the_target_hr_exactly_stops",),
    ),
    Mutant(
        "checkpoint-before-best-weights", _TRAIN, _BEST_SAVED,
        f"{_IN_LOOP}self._save()\n{_BEST_SAVED}",
        "the epoch's checkpoint is written before its best weights",
        (_DECISIONS + _KILL,),
    ),
    # --- the gate: not worse is >= -tolerance ----------------------------------------------------
    Mutant(
        "gate-strict", _COMPARE,
        "blessed = new - old >= -tolerance",
        "blessed = new - old > -tolerance",
        "an equal model, or one worse by exactly the tolerance, is refused",
        (_DECISIONS + _GATE,),
    ),
    # --- metrics: ties count against the positive ------------------------------------------------
    Mutant(
        "sampled-ties-for-positive", "training_core/evaluation/metrics.py",
        "scores[:, :-1] >= positive",
        "scores[:, :-1] > positive",
        "sampled HR/NDCG: a negative tying the positive ranks below it",
        (_METRICS + "test_hand_made_table_ties_duplicates_and_padding",),
    ),
    Mutant(
        "sampled-duplicates-count", "training_core/evaluation/metrics.py",
        "tf.logical_not(masked[:, :-1]), scores[:, :-1] >= positive",
        "tf.ones_like(masked[:, :-1]), scores[:, :-1] >= positive",
        "sampled HR/NDCG: masked duplicate negatives count against the positive",
        (_METRICS + "test_hand_made_table_ties_duplicates_and_padding",),
    ),
    Mutant(
        "catalog-ties-for-positive", "training_core/evaluation/metrics.py",
        "counted = tf.logical_and(candidate, scores >= positive)",
        "counted = tf.logical_and(candidate, scores > positive)",
        "full catalog: an item tying the positive ranks below it",
        (_CATALOG + "test_sums_on_a_hand_made_table",),
    ),
    Mutant(
        "catalog-positive-competes", "training_core/evaluation/metrics.py",
        _CANDIDATE,
        "candidate = tf.logical_not(excluded)",
        "full catalog: the held-out item counts against itself",
        (_CATALOG + "test_sums_on_a_hand_made_table",),
    ),
    Mutant(
        "catalog-training-items-compete", "training_core/evaluation/metrics.py",
        _CANDIDATE,
        "candidate = items[None, :] != positives[:, None]",
        "full catalog: the user's training positives count against the held-out item",
        (_CATALOG + "test_sums_on_a_hand_made_table",),
    ),
    Mutant(
        "hit-cutoff-off-by-one", "training_core/evaluation/metrics.py",
        "hit = tf.logical_and(evaluated, rank < k)",
        "hit = tf.logical_and(evaluated, rank <= k)",
        "rank k (the 11th) is a hit",
        (_METRICS + "test_hand_made_table_ties_duplicates_and_padding",),
    ),
    Mutant(
        "ndcg-discount", "training_core/evaluation/metrics.py",
        "tf.cast(rank, tf.float32) + 2.0",
        "tf.cast(rank, tf.float32) + 1.0",
        "NDCG's discount is log2(rank + 1): rank 0 divides by zero",
        (_METRICS + "test_hand_made_table_ties_duplicates_and_padding",),
    ),
    Mutant(
        "catalog-cap-all-users", "training_core/evaluation/full_catalog.py",
        "if max_users <= 0 or max_users >= n:",
        "if max_users <= 0 or max_users > n:",
        "a cap equal to the user count samples instead of taking all",
        (_CATALOG + "test_the_cap_is_honoured_and_stated",),
        accepted="equivalent: a cap of exactly n sorts a permutation of all n positions, which "
        "is np.arange(n), the same users in the same order; no test can tell the two apart",
    ),
    # --- the eval sampler: distinct negatives, never a seen item ---------------------------------
    Mutant(
        "eval-short-boundary", _SAMPLER,
        "short = sizes <= n  # Take every never-seen item, fill with repeats.",
        "short = sizes < n  # Take every never-seen item, fill with repeats.",
        "a user with exactly n never-seen items is miscounted as short",
        (_SAMPLING + "test_distinct_eval_negatives",),
    ),
    Mutant(
        "eval-repeats-not-redrawn", _SAMPLER,
        "clash[:, 1:] = part[:, 1:] == part[:, :-1]",
        "clash[:, 2:] = part[:, 2:] == part[:, :-2]",
        "eval negatives: adjacent repeats are not redrawn (negatives not distinct)",
        (_SAMPLING + "test_distinct_eval_negatives",),
    ),
    Mutant(
        "eval-dense-beyond-complement", _SAMPLER,
        "keys[np.arange(width)[None, :] >= sizes[part][:, None]] = 2.0",
        "keys[np.arange(width)[None, :] > sizes[part][:, None]] = 2.0",
        "eval negatives: a rank one past the never-seen set (an id beyond the catalogue)",
        (
            _SAMPLING + "test_distinct_eval_negatives",
            _GAPS + "test_distinct_eval_negatives_are_items_of_the_catalogue",
        ),
    ),
    Mutant(
        "complement-ties", _SAMPLER,
        "below = _count_sorted(self._keys, q, equal_below=True)  # Eval candidates.",
        "below = _count_sorted(self._keys, q, equal_below=False)  # Eval candidates.",
        "never-seen rank -> item skips too few seen items (a seen item is drawn)",
        (_SAMPLING + "test_distinct_eval_negatives",),
    ),
    Mutant(
        "eval-positive-is-first", _SAMPLER,
        "positives = shard.items[shard.offsets[1:] - 1]",
        "positives = shard.items[shard.offsets[:-1]]",
        "the eval positive is the user's oldest item, not the held-out last",
        (_SAMPLING + "test_distinct_eval_negatives",),
    ),
    Mutant(
        "train-keeps-held-out", _SAMPLER,
        "out[self.offsets[1:] - 1] = True",
        "out[self.offsets[:-1]] = True",
        "training positives drop the oldest item and train on the held-out one",
        (_SAMPLING + "test_train_rows_counts_labels_and_no_positive_among_negatives",),
    ),
    # --- auto's epochs: by training positives, not rows ------------------------------------------
    Mutant(
        "auto-counts-rows", "training_core/data/prep_plan.py",
        "num_epochs = config.resolved_epochs(num_train_positives)",
        "num_epochs = config.resolved_epochs(rows_kept)",
        "auto prepares the epochs that the row count (not the positives) chooses",
        (_DECISIONS + _AUTO,),
    ),
    Mutant(
        "auto-limit-exclusive", "training_core/training/presets.py",
        "if num_train_positives <= limit:",
        "if num_train_positives < limit:",
        "data exactly at a size limit gets the larger preset",
        (_DECISIONS + _AUTO,),
    ),
    # --- preflight ------------------------------------------------------------------------------
    Mutant(
        "preflight-tpu-mirrored", _PREFLIGHT,
        'if t.is_tpu and s not in ("tpu", "auto"):',
        'if t.is_tpu and s not in ("tpu", "auto", "mirrored"):',
        "a TPU profile with strategy mirrored passes",
        (_IMPOSSIBLE,),
    ),
    Mutant(
        "preflight-tpu-strategy-without-tpu", _PREFLIGHT,
        'if s == "tpu" and not t.is_tpu:',
        'if s == "tpu" and t.is_tpu:',
        "strategy tpu on a CPU machine passes",
        (_IMPOSSIBLE, _CATALOGUE),
    ),
    Mutant(
        "preflight-one-device-two-gpus", _PREFLIGHT,
        'if s == "one_device" and (gpus > 1 or t.replica_count > 1):',
        'if s == "one_device" and (gpus > 2 or t.replica_count > 1):',
        "one_device on a 2-GPU machine passes",
        (_IMPOSSIBLE, _GAPS + "test_one_device_on_two_gpus_is_refused"),
    ),
    Mutant(
        "preflight-two-workers", _PREFLIGHT,
        'if t.replica_count > 1 and s not in ("multi_worker_mirrored", "auto"):',
        'if t.replica_count > 2 and s not in ("multi_worker_mirrored", "auto"):',
        "2 training machines with a one-machine strategy pass",
        (_IMPOSSIBLE,),
    ),
    Mutant(
        "preflight-mwm-one-machine", _PREFLIGHT,
        'if s == "multi_worker_mirrored" and t.replica_count < 2:',
        'if s == "multi_worker_mirrored" and t.replica_count < 1:',
        "multi_worker_mirrored on one machine passes",
        (_IMPOSSIBLE, _GAPS + "test_multi_worker_mirrored_on_one_machine_is_refused"),
    ),
    Mutant(
        "preflight-data-replicas", _PREFLIGHT,
        "if m.accelerator_type or m.replica_count > 1:",
        "if m.accelerator_type:",
        "data prep or evaluate with several replicas passes",
        (_IMPOSSIBLE, _GAPS + "test_data_and_evaluate_refuse_replicas"),
    ),
    Mutant(
        "preflight-batch-per-machine", _PREFLIGHT,
        "problems += batch_problems(t.sync_replicas, train_batch_size, eval_users_per_batch)",
        "problems += batch_problems(t.replica_count, train_batch_size, eval_users_per_batch)",
        "batches are split over machines, not over the replicas (devices)",
        (_PROFILES + "test_preflight_checks_batches_against_replicas",),
    ),
    # --- submit's request rules ------------------------------------------------------------------
    Mutant(
        "submit-project-form", _SUBMIT_PY,
        'if not names.PROJECT_ID.fullmatch(config.project or ""):', "if False:",
        "a malformed project id passes", (_SUBMIT % "project-form",),
    ),
    Mutant(
        "submit-region", _SUBMIT_PY,
        '    problem = region_problem(config.region, "region")\n    if problem:',
        '    problem = region_problem(config.region, "region")\n    if False:',
        "an unknown region passes", (_SUBMIT % "region",),
    ),
    Mutant(
        "submit-root-not-gcs", _SUBMIT_PY,
        'if not config.pipeline_root.startswith("gs://"):', "if False:",
        "a local pipeline root passes", (_SUBMIT % "root-not-gcs",),
    ),
    Mutant(
        "submit-cron-fields", _SUBMIT_PY,
        "if len(cron.split()) != 5:", "if len(cron.split()) > 5:",
        "a cron with fewer than 5 fields passes", (_SUBMIT % "cron",),
    ),
    Mutant(
        "submit-max-runs-zero", _SUBMIT_PY,
        "if config.max_concurrent_runs < 1:", "if config.max_concurrent_runs < 0:",
        "0 concurrent runs passes", (_SUBMIT % "max-concurrent-runs",),
    ),
    Mutant(
        "submit-label-count", _SUBMIT_PY,
        "if len(labels) > names.MAX_LABELS:", "if len(labels) >= names.MAX_LABELS:",
        "exactly 64 labels (the most Vertex AI takes) are refused",
        (_SUBMIT % "label-count", _GAPS + "test_submit_takes_exactly_64_labels"),
    ),
    # --- verify's custom-job service rules -------------------------------------------------------
    Mutant(
        "job-parent-region", _CUSTOM_JOB,
        'elif endpoint_location and parent["location"] != endpoint_location:', "elif False:",
        "a job sent to another region's endpoint passes", (_JOB % "parent-region",),
    ),
    Mutant(
        "job-primary-replicas", _CUSTOM_JOB,
        "if i == 0 and pool.replica_count != 1:", "if False:",
        "a primary pool of 2 replicas passes", (_JOB % "primary-replicas",),
    ),
    Mutant(
        "job-accelerator-type", _CUSTOM_JOB,
        "if machine.accelerator_count and not machine.accelerator_type:", "if False:",
        "an accelerator count without a type passes", (_JOB % "accelerator-without-type",),
    ),
)  # fmt: skip


class MutantError(ValueError):
    """A mutant that cannot be applied: its text is not exactly once in its file."""


def locate(mutant: Mutant, root: str) -> int:
    """The 1-based line where ``mutant.original`` starts in its file under ``root``.

    Raises:
        MutantError: the file is missing, or the text occurs there not exactly once.
    """
    path = os.path.join(root, mutant.file)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise MutantError(f"mutant {mutant.id}: {mutant.file} does not exist") from None
    count = text.count(mutant.original)
    if count != 1:
        raise MutantError(
            f"mutant {mutant.id}: its original text occurs {count} times in {mutant.file} (must "
            f"be exactly once): {mutant.original.strip()[:80]!r}; update the mutant in "
            "tools/mutants.py to today's code"
        )
    return text[: text.index(mutant.original)].count("\n") + 1


def check_catalogue(mutants: tuple[Mutant, ...] = MUTANTS) -> None:
    """Refuses duplicate ids, no-op mutants and mutants without tests."""
    seen: set[str] = set()
    for m in mutants:
        if m.id in seen:
            raise MutantError(f"mutant id {m.id!r} is used twice")
        seen.add(m.id)
        if m.original == m.replacement:
            raise MutantError(f"mutant {m.id}: the replacement equals the original")
        if not m.tests:
            raise MutantError(f"mutant {m.id}: names no tests")


def judge(returncode: int | None) -> str:
    """A mutant's outcome from its pytest exit code (None: it ran past the timeout).

    pytest exits 0 when all tests passed (the mutant survived) and 1 when some failed (killed);
    a run past the timeout counts as killed (the mutant made a test hang). 2-5 (interrupted,
    internal error, usage error such as an unknown node id, no tests collected) say nothing about
    the mutant: an error.
    """
    if returncode is None:
        return TIMEOUT
    return {0: SURVIVED, 1: KILLED}.get(returncode, ERROR)


@dataclasses.dataclass(frozen=True)
class Result:
    """What one mutant's run gave."""

    mutant: Mutant
    line: int | None  # None: the mutant could not be applied.
    outcome: str
    seconds: float
    detail: str = ""


def failures(results: list[Result]) -> list[str]:
    """Why the check fails: errors, and survivors that their mutant does not accept."""
    out = []
    for r in results:
        if r.outcome == ERROR:
            out.append(f"{r.mutant.id}: error: {r.detail}")
        elif r.outcome == SURVIVED and not r.mutant.accepted:
            out.append(
                f"{r.mutant.id}: survived {', '.join(r.mutant.tests)}; add a test that fails "
                "on it, or say in its `accepted` why it may survive"
            )
    return out


def tracked_files(repo: str) -> list[str]:
    """The working tree's files as they are now: tracked and untracked, less what git ignores."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, check=True, capture_output=True,
    ).stdout  # fmt: skip
    return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(repo, p))]


def private_copy(repo: str, dest: str) -> None:
    """Copies the working tree (not .git, not ignored outputs) into ``dest``."""
    for rel in tracked_files(repo):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(repo, rel), target)


def _pytest_env(copy: str) -> dict[str, str]:
    # The venv's editable install points at the checkout: the copy must come first on sys.path,
    # for this process (cwd) and for any Python child a test starts (PYTHONPATH). No .pyc files:
    # they are checked by the source's size and mtime in whole seconds, so a mutant of the same
    # size written within the second of the last one could run the last one's bytecode.
    env = dict(os.environ, PYTHONPATH=copy, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def run_tests(
    python: str, copy: str, tests: tuple[str, ...], timeout_s: float
) -> tuple[int | None, str]:
    """Runs ``tests`` in ``copy``: pytest's exit code (None: timed out), its output's tail."""
    cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    proc = subprocess.Popen(
        cmd, cwd=copy, env=_pytest_env(copy), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out[-2000:]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # The pytest we started and its children.
        proc.communicate()
        return None, f"ran past {timeout_s:.0f} s"


def check_copy_imports(python: str, copy: str) -> None:
    """Makes sure the copy's product packages, not the checkout's, are what the tests import."""
    code = (
        "import importlib.util as u; print(u.find_spec('training_core').origin); "
        "print(u.find_spec('pipelines').origin)"
    )
    out = subprocess.run(
        [python, "-c", code], cwd=copy, env=_pytest_env(copy), check=True, capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip
    real = os.path.realpath(copy)
    stray = [o for o in out if not os.path.realpath(o).startswith(real + os.sep)]
    if stray:
        raise SystemExit(
            f"the copy in {copy} imports {stray} from outside it; cannot mutate safely"
        )


def run_mutant(mutant: Mutant, copy: str, python: str, timeout_s: float) -> Result:
    """Applies ``mutant`` in ``copy``, runs its tests there, restores the file."""
    start = time.monotonic()
    try:
        line = locate(mutant, copy)
    except MutantError as e:
        return Result(mutant, None, ERROR, 0.0, str(e))
    path = os.path.join(copy, mutant.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(mutant.original, mutant.replacement))
        code, tail = run_tests(python, copy, mutant.tests, timeout_s)
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    outcome = judge(code)
    detail = tail.strip().splitlines()[-1] if outcome == ERROR and tail.strip() else ""
    return Result(mutant, line, outcome, time.monotonic() - start, detail)


def table(results: list[Result]) -> str:
    """The results as a Markdown table."""
    rows = ["| mutant | where | breaks | outcome | s |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        where = f"{r.mutant.file}:{r.line}" if r.line else r.mutant.file
        outcome = r.outcome + (" (accepted)" if r.outcome == SURVIVED and r.mutant.accepted else "")
        rows.append(
            f"| {r.mutant.id} | {where} | {r.mutant.breaks} | {outcome} | {r.seconds:.0f} |"
        )
    return "\n".join(rows)


def select(only: list[str] | None) -> tuple[Mutant, ...]:
    """The mutants named by ``--only`` (all when None); an unknown id is an error naming it."""
    if not only:
        return MUTANTS
    by_id = {m.id: m for m in MUTANTS}
    unknown = [i for i in only if i not in by_id]
    if unknown:
        raise SystemExit(f"--only: unknown mutant(s) {', '.join(unknown)}; see --list")
    return tuple(by_id[i] for i in only)


def main(argv: list[str] | None = None) -> int:
    """The command line: list or run the mutants; 0 when every survivor is accepted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="print the mutants; run nothing")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S,
        help=f"seconds per mutant's tests (default {DEFAULT_TIMEOUT_S}); past it: killed",
    )  # fmt: skip
    parser.add_argument(
        "--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
        help="the interpreter that runs pytest (default: the repository's .venv)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    check_catalogue()
    mutants = select(args.only)
    if args.list:
        for m in mutants:
            try:
                where = f"{m.file}:{locate(m, ROOT)}"
            except MutantError as e:
                where = f"{m.file}: NOT FOUND ({e})"
            print(f"{m.id}  {where}\n    breaks: {m.breaks}\n    tests: {' '.join(m.tests)}")
            if m.accepted:
                print(f"    accepted survivor: {m.accepted}")
        return 0
    if not os.path.exists(args.python):
        raise SystemExit(f"--python {args.python} does not exist; run make setup first")
    with tempfile.TemporaryDirectory(prefix="ncf-mutants-") as copy:
        private_copy(ROOT, copy)
        check_copy_imports(args.python, copy)
        tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
        print(f"baseline: {len(tests)} test ids on the unmutated copy ...", flush=True)
        code, tail = run_tests(args.python, copy, tests, args.timeout * 2)
        if code != 0:
            print(tail, file=sys.stderr)
            print("the mutants' tests fail on the unmutated tree: fix that first", file=sys.stderr)
            return 1
        results = []
        for m in mutants:
            r = run_mutant(m, copy, args.python, args.timeout)
            print(f"{m.id}: {r.outcome} ({r.seconds:.0f} s)", flush=True)
            results.append(r)
    print()
    print(table(results))
    counts = {o: sum(r.outcome == o for r in results) for o in (KILLED, TIMEOUT, SURVIVED, ERROR)}
    print(
        f"\n{len(results)} mutants: {counts[KILLED] + counts[TIMEOUT]} killed "
        f"({counts[TIMEOUT]} by timeout), {counts[SURVIVED]} survived "
        f"({sum(r.outcome == SURVIVED and bool(r.mutant.accepted) for r in results)} accepted), "
        f"{counts[ERROR]} errors"
    )
    bad = failures(results)
    for line in bad:
        print("FAIL " + line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

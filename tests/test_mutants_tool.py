"""tools/mutants.py (``make mutants``) itself: its catalogue matches today's code, and its judge.

The mutation run takes minutes and runs on demand; these checks are cheap and run with the suite,
so a product edit that moves a mutant's line fails here, naming the mutant, not weeks later.
"""

import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_tool():
    spec = importlib.util.spec_from_file_location(
        "mutants", os.path.join(ROOT, "tools", "mutants.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built.
    spec.loader.exec_module(module)
    return module


mutants = _load_tool()


def test_every_mutant_s_text_occurs_exactly_once_in_today_s_tree():
    mutants.check_catalogue()
    assert 25 <= len(mutants.MUTANTS) <= 45
    for m in mutants.MUTANTS:
        assert mutants.locate(m, ROOT) >= 1


def test_every_mutant_names_tests_that_exist():
    for m in mutants.MUTANTS:
        for node in m.tests:
            path, _, name = node.partition("::")
            function = re.sub(r"\[.*\]$", "", name)
            with open(os.path.join(ROOT, path)) as f:
                assert f"def {function}(" in f.read(), f"mutant {m.id}: {node} is not a test"


def test_a_mutant_whose_text_is_gone_or_repeated_is_refused_naming_it(tmp_path):
    (tmp_path / "rule.py").write_text("x = a >= b\ny = a >= b\n")
    twice = mutants.Mutant("twice", "rule.py", "a >= b", "a > b", "", ("t",))
    gone = mutants.Mutant("gone", "rule.py", "c < d", "c <= d", "", ("t",))
    elsewhere = mutants.Mutant("elsewhere", "missing.py", "a", "b", "", ("t",))
    for m, says in ((twice, "occurs 2 times"), (gone, "occurs 0 times"), (elsewhere, "not exist")):
        with pytest.raises(mutants.MutantError, match=f"mutant {m.id}: .*{says}"):
            mutants.locate(m, str(tmp_path))
    once = mutants.Mutant("once", "rule.py", "y = a", "y = -a", "", ("t",))
    assert mutants.locate(once, str(tmp_path)) == 2
    with pytest.raises(mutants.MutantError, match="'once' is used twice"):
        mutants.check_catalogue((once, once))


def test_the_judge_reads_pytest_s_exit_codes():
    assert mutants.judge(1) == mutants.KILLED  # Some test failed.
    assert mutants.judge(0) == mutants.SURVIVED  # Every test passed.
    assert mutants.judge(None) == mutants.TIMEOUT
    for code in (2, 3, 4, 5):  # Interrupted, internal error, bad node id, nothing collected.
        assert mutants.judge(code) == mutants.ERROR


def test_only_unaccepted_survivors_and_errors_fail_the_check():
    plain = mutants.Mutant("plain", "f.py", "a", "b", "", ("t",))
    accepted = mutants.Mutant("ok", "f.py", "a", "b", "", ("t",), accepted="equivalent")

    def result(m, outcome):
        return mutants.Result(m, 1, outcome, 0.0, "why")

    passing = [
        result(plain, mutants.KILLED),
        result(plain, mutants.TIMEOUT),
        result(accepted, mutants.SURVIVED),
    ]
    assert mutants.failures(passing) == []
    bad = mutants.failures([*passing, result(plain, mutants.SURVIVED), result(accepted, "error")])
    assert len(bad) == 2 and bad[0].startswith("plain: survived") and "ok: error" in bad[1]


def test_a_mutant_runs_in_the_copy_and_the_file_is_restored(tmp_path):
    """End to end on a two-file project: a mutant its test catches, one it does not."""
    (tmp_path / "rule.py").write_text("def older(a, b):\n    return a >= b\n")
    (tmp_path / "test_rule.py").write_text(
        "from rule import older\n\ndef test_older():\n    assert older(2, 1)\n"
    )
    before = (tmp_path / "rule.py").read_text()
    caught = mutants.Mutant("flip", "rule.py", "a >= b", "a < b", "", ("test_rule.py",))
    missed = mutants.Mutant("strict", "rule.py", "a >= b", "a > b", "", ("test_rule.py",))
    run = [mutants.run_mutant(m, str(tmp_path), sys.executable, 60) for m in (caught, missed)]
    assert [(r.outcome, r.line) for r in run] == [(mutants.KILLED, 2), (mutants.SURVIVED, 2)]
    assert (tmp_path / "rule.py").read_text() == before

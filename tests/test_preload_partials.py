"""verify's LD_PRELOAD builds use atomic_writes' partial names, so stale ones are found (issue 55).

``preload.build`` compiles into a private sibling of the library and renames it into place. The
sibling is named by ``atomic_writes.partial_name``, the one home for such names, so that
``is_partial`` recognizes it and ``remove_stale_partials`` removes one a killed build left. A
stand-in compiler (a script) records the output name it was given, and can fail or kill the
build that runs it, as a killed ``verify`` would leave things.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

from training_core.common import atomic_writes
from vertex_emulator import preload


def _compiler(tmp_path, then: str = "") -> tuple[str, str]:
    """A stand-in ``cc`` that writes its ``-o`` file, records its name, then runs ``then``."""
    record = tmp_path / "output-name.txt"
    fake = tmp_path / "fake-cc"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, signal, sys\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n"
        "open(out, 'wb').write(b'not really a library')\n"
        f"open({str(record)!r}, 'w').write(out)\n"
        f"{then}\n"
    )
    fake.chmod(0o755)
    source = tmp_path / "x_preload.c"
    source.write_text("int x;\n")
    return str(fake), str(source)


def _partials(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if ".partial" in n)


def test_a_build_compiles_under_a_partial_name_atomic_writes_recognizes(tmp_path):
    cc, source = _compiler(tmp_path)
    lib_dir = str(tmp_path / "lib")
    library = preload.build(source, "ncf-test", lib_dir, cc)
    with open(tmp_path / "output-name.txt") as f:
        built_as = f.read()
    assert os.path.dirname(built_as) == lib_dir
    name = os.path.basename(built_as)
    prefix = f"{os.path.basename(library)}{atomic_writes.PARTIAL_SUFFIX}-{os.getpid()}-"
    assert name.startswith(prefix)
    assert atomic_writes.is_partial(name)
    assert os.listdir(lib_dir) == [os.path.basename(library)]  # Renamed into place.
    assert preload.build(source, "ncf-test", lib_dir, cc) == library  # Reused.


def test_a_failed_build_leaves_no_partial(tmp_path):
    cc, source = _compiler(tmp_path, then="sys.exit('cc: error: no')")
    lib_dir = str(tmp_path / "lib")
    with pytest.raises(RuntimeError, match="could not build .*cc: error: no"):
        preload.build(source, "ncf-test", lib_dir, cc)
    assert os.listdir(lib_dir) == []


def test_a_killed_build_s_partial_is_removed_by_the_next_build(tmp_path):
    # The compiler kills the build that started it after writing its output: what a verify
    # killed mid-build leaves.
    cc, source = _compiler(tmp_path, then="os.kill(os.getppid(), signal.SIGKILL)")
    lib_dir = str(tmp_path / "lib")
    code = "import sys; from vertex_emulator import preload; preload.build(*sys.argv[1:])"
    killed = subprocess.run(
        [sys.executable, "-c", code, source, "ncf-test", lib_dir, cc], cwd=ROOT, check=False
    )
    assert killed.returncode == -9
    (left,) = _partials(lib_dir)
    assert atomic_writes.is_partial(left)
    library = os.path.join(lib_dir, left.split(atomic_writes.PARTIAL_SUFFIX)[0])
    assert atomic_writes.remove_stale_partials(library) == [os.path.join(lib_dir, left)]

    # And the next build removes such a leftover itself.
    again = subprocess.run(
        [sys.executable, "-c", code, source, "ncf-test", lib_dir, cc], cwd=ROOT, check=False
    )
    assert again.returncode == -9 and len(_partials(lib_dir)) == 1
    cc, _ = _compiler(tmp_path)
    assert preload.build(source, "ncf-test", lib_dir, cc) == library
    assert os.listdir(lib_dir) == [os.path.basename(library)]

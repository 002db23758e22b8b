"""The instructor's JAX compile cache (``encoder_lib.autograde.jax_cache``): built from a reference
notebook, read once by the grading process and checked against its manifest, copied for each
graded notebook, and never written by a grading kernel. The last test grades two students with
the real ``nbgrader autograde``: the first tries to plant programs for the second.

A small JAX notebook stands in for notebook 10 (the same cells a grading kernel runs: setup,
answer, test), so that these tests take seconds; the class's pipeline grades notebook 10 itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("jax")

from encoder_lib.autograde import jax_cache
from encoder_lib.course import JAX_CACHE_READ_ONLY_VARIABLE, JAX_CACHE_VARIABLE
from tools import throwaway_course as C

ASSIGNMENT = "99_jax_probe"

SETUP = """import jax
import jax.numpy as jnp
from encoder_lib.course import setup_notebook

setup_notebook()"""

ANSWER = """def squash(x):
    ### BEGIN SOLUTION
    return 2.0 * jnp.tanh(x) + x.mean()
    ### END SOLUTION"""

TEST = """for n in (3, 5, 7):
    assert abs(float(squash(jnp.zeros(n)).sum())) < 1e-6
print("Correct")"""


def _cell(source: str, **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False,
                                 "grade": False, **nbgrader}  # fmt: skip
    return cell


def _reference(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        _cell(SETUP, grade_id="setup", locked=True),
        _cell(ANSWER, grade_id="squash", solution=True),
        _cell(TEST, grade_id="test_squash", grade=True, points=1, locked=True),
    ]
    path = folder / f"{ASSIGNMENT}.ipynb"
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(the reference notebook, the instructor's cache built from it)."""
    root = tmp_path_factory.mktemp("instructor")
    reference = _reference(root / "solutions" / ASSIGNMENT)
    folder = root / "jax-grading"
    jax_cache.build(folder, reference)
    return reference, folder


def _manifest(folder: Path) -> dict[str, str]:
    return json.loads((folder / jax_cache.MANIFEST).read_text())["entries"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_build_lists_every_program_with_its_digest(built):
    _, folder = built
    entries = _manifest(folder)
    on_disk = {p.name for p in folder.iterdir()} - {jax_cache.MANIFEST}
    assert set(entries) == on_disk and len(entries) >= 3, sorted(on_disk)
    assert all(name.endswith("-cache") for name in entries)
    assert all(entries[name] == _sha(folder / name) for name in entries)
    manifest = json.loads((folder / jax_cache.MANIFEST).read_text())
    versions = manifest["built_from"]["versions"].split()
    assert f"jax=={__import__('jax').__version__}" in versions and len(versions) == 3


def test_a_changed_or_added_file_is_never_read(built, tmp_path):
    _, folder = built
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    changed = sorted(_manifest(copy))[0]
    (copy / changed).write_bytes(b"planted")
    (copy / "jit_planted-0000-cache").write_bytes(b"planted")
    sealed = jax_cache.sealed(copy, build_if_missing=False)
    assert sealed.rejected == (changed,)
    assert set(sealed.files) == set(_manifest(copy)) - {changed}
    assert all(hashlib.sha256(d).hexdigest() == _manifest(copy)[n] for n, d in sealed.files.items())


def test_what_the_folder_becomes_after_the_first_read_is_never_seen(built, tmp_path):
    _, folder = built
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    first = jax_cache.sealed(copy, build_if_missing=False)
    for entry in copy.iterdir():
        entry.write_bytes(b"planted")
    again = jax_cache.sealed(copy, build_if_missing=False)
    assert again is first and again.rejected == ()
    with jax_cache.private_copy(again, tmp_path) as private:
        assert {p.name: _sha(p) for p in private.iterdir()} == _manifest(folder)
    assert not private.exists()


def test_a_manifest_cannot_name_a_file_outside_the_folder(built, tmp_path):
    _, folder = built
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    secret = tmp_path / "secret"
    secret.write_bytes(b"not a program")
    manifest = json.loads((copy / jax_cache.MANIFEST).read_text())
    manifest["entries"]["../secret"] = _sha(secret)
    (copy / jax_cache.MANIFEST).write_text(json.dumps(manifest))
    sealed = jax_cache.sealed(copy, build_if_missing=False)
    assert "../secret" in sealed.rejected and "../secret" not in sealed.files


def test_a_worker_trusts_only_the_manifest_pinned_before_grading(built, tmp_path, monkeypatch):
    """``python -m encoder_lib.autograde`` pins the manifest's digest before its workers start:
    a worker that first reads the folder after a kernel rewrote an entry and the manifest to
    match it grades without the cache."""
    _, folder = built
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    monkeypatch.setenv(jax_cache.GRADING_CACHE_VARIABLE, str(copy))
    monkeypatch.setenv(jax_cache.DIGEST_VARIABLE, "")
    digest = jax_cache.pin(False)
    assert os.environ[jax_cache.DIGEST_VARIABLE] == digest == _sha(copy / jax_cache.MANIFEST)
    manifest = json.loads((copy / jax_cache.MANIFEST).read_text())
    name = sorted(manifest["entries"])[0]
    (copy / name).write_bytes(b"planted")
    manifest["entries"][name] = hashlib.sha256(b"planted").hexdigest()
    (copy / jax_cache.MANIFEST).write_text(json.dumps(manifest))
    assert jax_cache.sealed(copy, build_if_missing=False) is None


def test_a_grading_process_reads_a_built_cache_before_its_first_kernel(
    built, tmp_path, monkeypatch
):
    """Plain `nbgrader autograde` of any assignment makes its ``JudgeExecute`` before it runs a
    notebook: a cache already built is read then, and what a kernel writes later is not seen."""
    from encoder_lib.autograde.judge_execute import JudgeExecute

    _, folder = built
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    monkeypatch.setenv(jax_cache.GRADING_CACHE_VARIABLE, str(copy))
    JudgeExecute()
    for entry in copy.iterdir():
        entry.write_bytes(b"planted")
    sealed = jax_cache.sealed()
    assert set(sealed.files) == set(_manifest(folder)) and sealed.rejected == ()


def test_a_cache_missing_when_grading_began_is_built_by_the_grader(built, tmp_path, monkeypatch):
    """A folder without a manifest when the grading process began is neither read nor built
    then; at its first notebook 10 the process builds it itself, even if a manifest has
    appeared meanwhile (a kernel's, with a planted program)."""
    from encoder_lib.autograde.judge_execute import JudgeExecute

    reference, folder = built
    monkeypatch.setattr(jax_cache, "REFERENCE", reference)
    later = tmp_path / "not-built"
    monkeypatch.setenv(jax_cache.GRADING_CACHE_VARIABLE, str(later))
    JudgeExecute()
    assert not later.exists()
    later.mkdir()
    (later / "jit_squash-0000-cache").write_bytes(b"planted")
    forged = {"entries": {"jit_squash-0000-cache": hashlib.sha256(b"planted").hexdigest()}}
    (later / jax_cache.MANIFEST).write_text(json.dumps(forged))
    sealed = jax_cache.sealed()
    assert "jit_squash-0000-cache" not in sealed.files
    assert set(sealed.files) == set(_manifest(folder)) == set(_manifest(later))


def _rewrite(folder: Path, change) -> None:
    manifest = json.loads((folder / jax_cache.MANIFEST).read_text())
    change(manifest["built_from"])
    (folder / jax_cache.MANIFEST).write_text(json.dumps(manifest))


def test_a_cache_built_from_other_sources_is_out_of_date(built, tmp_path):
    """The manifest records what the programs were built from; another encoder_lib, another
    JAX, or a reference notebook edited since, and the folder is not read."""
    reference, folder = built
    assert jax_cache.sealed(folder, build_if_missing=False) is not None
    moved = tmp_path / "solutions" / reference.name
    moved.parent.mkdir()
    shutil.copy(reference, moved)
    for name, change in {
        "library": lambda b: b.update(encoder_lib_sha256="0" * 64),
        "versions": lambda b: b.update(versions="jax==0.0 jaxlib==0.0 flax==0.0"),
        "reference": lambda b: b.update(reference=str(moved)),
    }.items():
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        _rewrite(copy, change)
        current = jax_cache._is_current(copy)
        assert current == (name == "reference"), name  # the same notebook, elsewhere
    moved.write_text(moved.read_text().replace("squash", "squish"))
    assert not jax_cache._is_current(tmp_path / "reference")
    assert jax_cache.sealed(tmp_path / "reference", build_if_missing=False) is None


def test_an_out_of_date_cache_is_built_again_by_the_grader(built, tmp_path, monkeypatch):
    from encoder_lib.autograde.judge_execute import JudgeExecute

    reference, folder = built
    monkeypatch.setattr(jax_cache, "REFERENCE", reference)
    stale = tmp_path / "stale"
    shutil.copytree(folder, stale)
    _rewrite(stale, lambda b: b.update(encoder_lib_sha256="0" * 64))
    monkeypatch.setenv(jax_cache.GRADING_CACHE_VARIABLE, str(stale))
    JudgeExecute()
    assert jax_cache._SEALED.get(stale) is None and not jax_cache._is_current(stale)
    sealed = jax_cache.sealed()
    assert jax_cache._is_current(stale) and set(sealed.files) == set(_manifest(folder))


def test_no_folder_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(jax_cache.GRADING_CACHE_VARIABLE, "")
    assert jax_cache.grading_cache_dir() is None and jax_cache.sealed() is None
    assert jax_cache.sealed(tmp_path / "none", build_if_missing=False) is None
    assert jax_cache.kernel_environment(None) == {
        JAX_CACHE_VARIABLE: "",
        JAX_CACHE_READ_ONLY_VARIABLE: "1",
    }


# What a grading kernel does with its private copy: load, then compile a program the copy lacks.
KERNEL = """
import json, os
import jax, jax.numpy as jnp
from encoder_lib.course import setup_notebook
counts = {"cache_hits": 0, "compile_requests_use_cache": 0}  # a miss writes no event here
jax.monitoring.register_event_listener(
    lambda event, **k: [counts.__setitem__(n, counts[n] + 1) for n in counts
                        if event == "/jax/compilation_cache/" + n])
setup_notebook()
exec(compile(ANSWER.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), "a", "exec"))
exec(TEST)
loaded = dict(counts)
float((jnp.ones((11, 13)) @ jnp.ones((13, 2))).sum())  # a program no build compiled
print(json.dumps({"loaded": loaded, "all": counts,
                  "files": sorted(os.listdir(jax.config.jax_compilation_cache_dir))}))
"""


def test_a_grading_kernel_loads_its_copy_and_writes_nothing(built, tmp_path):
    """The copy lives at another path than the build's folder: programs are keyed by what they
    compute, not by where the cache is (``jax_persistent_cache_enable_xla_caches``)."""
    _, folder = built
    sealed = jax_cache.sealed(folder, build_if_missing=False)
    with jax_cache.private_copy(sealed, tmp_path) as private:
        env = {**os.environ, **jax_cache.kernel_environment(private)}
        code = f"ANSWER = {ANSWER!r}\nTEST = {TEST!r}\n" + KERNEL
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        loaded, everything = out["loaded"], out["all"]
        assert loaded["cache_hits"] == loaded["compile_requests_use_cache"] >= 3, out
        assert everything["compile_requests_use_cache"] > everything["cache_hits"], out  # compiled

        assert out["files"] == sorted(_manifest(folder)), out  # ... and not written


# --- a student tries to plant programs for the next one --------------------------------------

ATTACK = """
import json, os, time
mine = jax.config.jax_compilation_cache_dir
for folder in (mine, {instructor!r}):
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(b"planted")
    with open(os.path.join(folder, "jit_squash-" + "0" * 64 + "-cache"), "wb") as handle:
        handle.write(b"planted")
with open({probe!r}, "w") as handle:
    json.dump({{"cache": mine, "time": time.time()}}, handle)
"""

PROBE = """
import hashlib, json, os, time
mine = jax.config.jax_compilation_cache_dir
counts = {{"cache_hits": 0, "compile_requests_use_cache": 0}}
jax.monitoring.register_event_listener(
    lambda event, **k: [counts.__setitem__(n, counts[n] + 1) for n in counts
                        if event == "/jax/compilation_cache/" + n])
for n in (3, 5, 7):
    float(squash(jnp.zeros(n)).sum())
seen = {{}}
for name in os.listdir(mine):
    with open(os.path.join(mine, name), "rb") as handle:
        seen[name] = hashlib.sha256(handle.read()).hexdigest()
with open({probe!r}, "w") as handle:
    json.dump({{"cache": mine, "files": seen, "counts": counts, "time": time.time()}}, handle)
"""


def _submission(course: C.Course, student: str, extra: str) -> None:
    nb = C.read(course.release_path(ASSIGNMENT, ASSIGNMENT))
    answer = "def squash(x):\n    return 2.0 * jnp.tanh(x) + x.mean()\n" + extra
    course.submit(student, ASSIGNMENT, ASSIGNMENT, C.with_cells(nb, {"squash": answer}))


def test_a_kernel_cannot_plant_a_program_that_another_students_kernel_loads(built, tmp_path):
    reference, built_folder = built
    instructor = tmp_path / "jax-grading"  # the grading run's cache: the attacker overwrites it
    shutil.copytree(built_folder, instructor)
    manifest = _manifest(instructor)

    course = C.Course.create(tmp_path / "course", [])
    shutil.copytree(reference.parent, course.root / "solutions" / ASSIGNMENT)
    course.generate(ASSIGNMENT)
    course.add_students(["a_attacker", "b_victim"])
    attacked, probed = tmp_path / "attacker.json", tmp_path / "victim.json"
    _submission(
        course, "a_attacker", ATTACK.format(instructor=str(instructor), probe=str(attacked))
    )
    _submission(course, "b_victim", PROBE.format(probe=str(probed)))

    env = {**C.env(), jax_cache.GRADING_CACHE_VARIABLE: str(instructor)}
    proc = subprocess.run(
        [str(C.VENV_BIN / "nbgrader"), "autograde", ASSIGNMENT],
        cwd=course.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    attack, probe = json.loads(attacked.read_text()), json.loads(probed.read_text())
    assert attack["time"] < probe["time"], "the attacker must be graded first"
    # the attack did happen: the instructor's folder now holds only planted bytes
    assert all((instructor / n).read_bytes() == b"planted" for n in manifest)
    assert (instructor / f"jit_squash-{'0' * 64}-cache").exists()
    # each kernel had its own copy, removed after grading
    assert attack["cache"] != probe["cache"]
    assert not Path(attack["cache"]).exists() and not Path(probe["cache"]).exists()
    # the victim's kernel saw the instructor's programs as built, nothing planted ...
    assert probe["files"] == manifest
    # ... and loaded them
    counts = probe["counts"]
    assert counts["cache_hits"] == counts["compile_requests_use_cache"] >= 3, counts
    # and both students' answers were graded as written
    for student in ("a_attacker", "b_victim"):
        scores = course.cell_scores(student, ASSIGNMENT, ASSIGNMENT)
        assert scores == {"test_squash": 1.0}, (student, scores)


def test_the_grading_command_says_its_usage_once():
    """``python -m encoder_lib.autograde`` looks at its arguments before its workers start (to
    pin the cache), quietly: what is wrong with them, or ``--help``, is printed once."""
    for args, stream in ((["--help"], "stdout"), ([], "stderr")):
        proc = subprocess.run(
            [sys.executable, "-m", "encoder_lib.autograde", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        said = getattr(proc, stream)
        assert said.count("usage:") == 1, said

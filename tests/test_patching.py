"""Patches change only the kernel file, apply exactly (with line offsets), and fail naming the hunk."""

import pytest

from judge.errors import JudgeError
from judge.stages.patch import apply_patch, patch_stats

BASE = "".join(f"line {i}\n" for i in range(1, 21))


def diff(header_old="a/submission.py", header_new="b/submission.py", hunk="@@ -5,3 +5,3 @@\n line 5\n-line 6\n+LINE SIX\n line 7\n"):
    return f"--- {header_old}\n+++ {header_new}\n{hunk}"


def test_a_hunk_replaces_its_lines():
    out = apply_patch(BASE, diff(), "submission.py")
    assert out.splitlines()[4:7] == ["line 5", "LINE SIX", "line 7"]
    assert out.endswith("line 20\n")


def test_a_hunk_whose_line_numbers_moved_still_applies_at_its_context():
    shifted = "header\nheader\n" + BASE
    out = apply_patch(shifted, diff(), "submission.py")
    assert out.splitlines()[6:9] == ["line 5", "LINE SIX", "line 7"]


def test_a_hunk_whose_context_is_missing_is_named():
    bad = diff(hunk="@@ -5,3 +5,3 @@\n line 5\n-line six\n+LINE SIX\n line 7\n")
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, bad, "submission.py", "proposals/x/patch.diff")
    assert str(error.value) == (
        "proposals/x/patch.diff: hunk 1 '@@ -5,3 +5,3 @@' of submission.py does not apply to the base "
        "(context not found; first line: 'line 5')"
    )


def test_a_patch_to_another_file_is_rejected():
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, diff("a/reference.py", "b/reference.py"), "submission.py", "p.diff")
    assert str(error.value) == "p.diff: touches reference.py; only the target's kernel file submission.py may change"


def test_creating_a_file_is_rejected():
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, diff("/dev/null", "b/submission.py"), "submission.py", "p.diff")
    assert str(error.value) == "p.diff: creates or deletes a file (/dev/null -> submission.py); only submission.py may change"


def test_binary_patches_are_rejected():
    text = "diff --git a/submission.py b/submission.py\nGIT binary patch\nliteral 10\n"
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, text, "submission.py", "p.diff")
    assert str(error.value) == "p.diff: binary patches are not accepted"


def test_a_truncated_hunk_is_rejected():
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, diff(hunk="@@ -5,3 +5,3 @@\n line 5\n-line 6\n"), "submission.py", "p.diff")
    assert str(error.value) == "p.diff: hunk '@@ -5,3 +5,3 @@' of submission.py is truncated (expected 3 old and 3 new lines)"


def test_text_that_is_not_a_diff_is_rejected():
    with pytest.raises(JudgeError) as error:
        apply_patch(BASE, "please make it faster\n", "submission.py", "p.diff")
    assert str(error.value) == "p.diff: no file changes found (expected a unified diff with ---/+++ headers)"


def test_paths_under_the_target_directory_are_the_kernel_file():
    out = apply_patch(BASE, diff("a/kernels/axpy/submission.py", "b/kernels/axpy/submission.py"), "submission.py")
    assert "LINE SIX" in out


def test_stats_count_hunks_and_lines():
    two = diff(hunk="@@ -1,2 +1,3 @@\n line 1\n+inserted\n line 2\n@@ -10,2 +11,1 @@\n-line 10\n line 11\n")
    stats = patch_stats(two)
    assert (stats.files, stats.hunks, stats.added, stats.removed) == (["submission.py"], 2, 1, 1)
    assert apply_patch(BASE, two, "submission.py").splitlines()[:3] == ["line 1", "inserted", "line 2"]

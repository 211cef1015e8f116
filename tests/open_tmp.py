"""A pytest plugin for one setup only, loaded with `-p open_tmp` (scripts/device_redteam.sh): pytest's temporary
directories are made searchable by others, so that judge, run as root, can drop its runners to uid nobody under
them (pytest makes them 0700, which judge.sandbox.confine's drop check refuses: the runners would stay root, with
every capability given up). Nothing else changes; without `-p open_tmp` it is never imported."""

import os

from _pytest.tmpdir import TempPathFactory

_mktemp = TempPathFactory.mktemp


def _open(path) -> None:
    for each in [path, *path.parents]:
        if str(each) in ("/", "/tmp"):
            break
        os.chmod(each, os.stat(each).st_mode | 0o005)


def _mktemp_opened(self, basename, numbered=True):
    made = _mktemp(self, basename, numbered)
    _open(made)
    return made


TempPathFactory.mktemp = _mktemp_opened


def pytest_sessionstart(session):
    _open(session.config._tmp_path_factory.getbasetemp())

"""The ledger's schema is built and upgraded by numbered migrations recorded in the database."""

import sqlite3

import pytest

import sqlite_utils

from judge.ledger import migrations
from judge.ledger import Ledger


def test_a_new_ledger_records_every_migration_in_order(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    assert migrations.applied(ledger.db) == [fn.__name__ for fn in migrations.MIGRATIONS]
    assert migrations.applied(ledger.db)[0] == "m001_initial"


def test_the_tables_are_named_for_what_they_hold_with_foreign_keys(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    assert set(ledger.db.table_names()) >= {
        "_judge_migrations", "proposals", "revisions", "sharks", "votes", "rounds", "runs",
        "evaluations", "stage_results", "benchmark_results", "timings", "kernel_resources"}
    fks = {(fk.column, fk.other_table) for fk in ledger.db["evaluations"].foreign_keys}
    assert fks == {("run_id", "runs"), ("round_id", "rounds"), ("revision_id", "revisions")}
    assert ledger.db.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_reopening_applies_nothing_twice(tmp_path):
    Ledger(tmp_path / "ledger.db").close()
    db = sqlite_utils.Database(tmp_path / "ledger.db")
    assert migrations.migrate(db) == []
    assert db["_judge_migrations"].count == len(migrations.MIGRATIONS)


def test_a_new_migration_applies_to_an_existing_ledger_and_keeps_its_rows(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.db["proposals"].insert({"id": "kept", "author": "a", "first_round": 1, "created_at": "t"})
    ledger.close()

    def m999_add_note_to_proposals(db):
        db["proposals"].add_column("note", str)

    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS + [m999_add_note_to_proposals])
    reopened = Ledger(tmp_path / "ledger.db")
    assert migrations.applied(reopened.db)[-1] == "m999_add_note_to_proposals"
    assert "note" in reopened.db["proposals"].columns_dict
    assert [r["id"] for r in reopened.db["proposals"].rows] == ["kept"]


def test_a_failing_migration_leaves_the_schema_as_it_was(tmp_path, monkeypatch):
    Ledger(tmp_path / "ledger.db").close()

    def m998_half_done(db):
        db["scratch"].create({"id": int}, pk="id")
        raise RuntimeError("boom")

    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS + [m998_half_done])
    db = sqlite_utils.Database(sqlite3.connect(tmp_path / "ledger.db"))
    with pytest.raises(RuntimeError, match="boom"):
        migrations.migrate(db)
    assert "scratch" not in db.table_names()
    assert "m998_half_done" not in migrations.applied(db)


def test_a_ledger_migrated_by_a_later_judge_is_refused_before_anything_is_written(tmp_path):
    from judge import __version__
    from judge.errors import JudgeError

    Ledger(tmp_path / "ledger.db").close()
    db = sqlite_utils.Database(sqlite3.connect(tmp_path / "ledger.db"))
    db["_judge_migrations"].insert({"name": "m900_from_the_future", "applied_at": "t"})
    dump = list(db.conn.iterdump())
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    with pytest.raises(JudgeError) as error:
        migrations.migrate(db, "ledger.db")
    assert str(error.value) == (f"ledger.db: written by a later judge: migrations m900_from_the_future are unknown to judge "
                                f"{__version__} (it knows {names[0]} to {names[-1]}); open it with a judge that knows them")
    assert list(db.conn.iterdump()) == dump and not db.conn.in_transaction


def test_an_up_to_date_ledger_is_only_read(tmp_path):
    """So that a read-only ledger still opens: migrate takes no write lock when nothing is pending."""
    Ledger(tmp_path / "ledger.db").close()
    db = sqlite_utils.Database(sqlite3.connect(f"{(tmp_path / 'ledger.db').as_uri()}?mode=ro", uri=True))
    assert migrations.migrate(db) == []


def test_an_older_ledger_is_upgraded_when_opened(tmp_path, monkeypatch):
    first = migrations.MIGRATIONS[:1]
    monkeypatch.setattr(migrations, "MIGRATIONS", first)
    Ledger(tmp_path / "ledger.db").close()
    monkeypatch.undo()
    assert migrations.applied(Ledger(tmp_path / "ledger.db").db) == [fn.__name__ for fn in migrations.MIGRATIONS]

"""The PostgreSQL triggers that keep the audit log append-only and its heads moving forward.

Run by the migrations (0001, 0005, 0020); databases built with ``create_all`` (tests) get
them too, through the table events registered here (:mod:`storage.audit` imports this
module). The log itself, its chains and its heads: :mod:`storage.audit`.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import DDL, Table
from sqlalchemy import event as sa_event

from storage.models import AuditEventRow, AuditHeadRow

_EVENTS = cast(Table, AuditEventRow.__table__)
_HEAD = cast(Table, AuditHeadRow.__table__)

#: DDL that makes ``audit_events`` append-only on PostgreSQL (run by migration 0001).
PG_AUDIT_GUARD_SQL: list[str] = [
    """
    CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = 'audit_events is append-only; ' || TG_OP || ' refused',
            ERRCODE = 'insufficient_privilege';
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_events_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()
    """,
    """
    CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()
    """,
]

#: Reverses :data:`PG_AUDIT_GUARD_SQL` (migration downgrade).
PG_AUDIT_GUARD_DROP_SQL: list[str] = [
    "DROP TRIGGER IF EXISTS audit_events_no_truncate ON audit_events",
    "DROP TRIGGER IF EXISTS audit_events_no_update_delete ON audit_events",
    "DROP FUNCTION IF EXISTS audit_events_append_only()",
]

#: DDL that makes ``audit_head`` move only forward, and only to a row that exists (migration 0004).
#: The application must update the head to append, so privileges alone cannot stop it rewinding
#: the head or pointing it past the rows; these triggers do. The row check is deferred to commit
#: (the head is written before the events it names) and names the table by its own schema, so a
#: temporary table called ``audit_events`` cannot stand in for the real one.
PG_AUDIT_HEAD_GUARD_SQL: list[str] = [
    """
    CREATE OR REPLACE FUNCTION audit_head_forward_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head is append-only; ' || TG_OP || ' refused',
                ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.id <> OLD.id OR NEW.seq <= OLD.seq THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head only moves forward (seq ' || OLD.seq || ' to ' || NEW.seq || ' refused)',
                ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END;
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION audit_head_names_a_row() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        found boolean;
    BEGIN
        IF NEW.seq = 0 THEN
            RETURN NULL;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.audit_events WHERE seq = $1 AND hash = $2)',
                       TG_TABLE_SCHEMA)
            INTO found USING NEW.seq, NEW.hash;
        IF NOT found THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head names seq ' || NEW.seq || ', which is not in audit_events with that hash',
                ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NULL;
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_head_forward_only
    BEFORE UPDATE OR DELETE ON audit_head
    FOR EACH ROW EXECUTE FUNCTION audit_head_forward_only()
    """,
    """
    CREATE TRIGGER audit_head_no_truncate
    BEFORE TRUNCATE ON audit_head
    FOR EACH STATEMENT EXECUTE FUNCTION audit_head_forward_only()
    """,
    """
    CREATE CONSTRAINT TRIGGER audit_head_names_a_row
    AFTER INSERT OR UPDATE ON audit_head
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION audit_head_names_a_row()
    """,
]

#: Reverses :data:`PG_AUDIT_HEAD_GUARD_SQL` (migration downgrade).
PG_AUDIT_HEAD_GUARD_DROP_SQL: list[str] = [
    "DROP TRIGGER IF EXISTS audit_head_names_a_row ON audit_head",
    "DROP TRIGGER IF EXISTS audit_head_no_truncate ON audit_head",
    "DROP TRIGGER IF EXISTS audit_head_forward_only ON audit_head",
    "DROP FUNCTION IF EXISTS audit_head_names_a_row()",
    "DROP FUNCTION IF EXISTS audit_head_forward_only()",
]

#: The head guard's row check for partitioned heads (migration 0020): a head names a row of its
#: own partition (``id``) at its position (``seq``), with that hash.
PG_AUDIT_PARTITION_SQL: list[str] = [
    """
    CREATE OR REPLACE FUNCTION audit_head_names_a_row() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        found boolean;
    BEGIN
        IF NEW.seq = 0 THEN
            RETURN NULL;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.audit_events WHERE part = $1 AND pseq = $2 AND hash = $3)',
                       TG_TABLE_SCHEMA)
            INTO found USING NEW.id, NEW.seq, NEW.hash;
        IF NOT found THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head names seq ' || NEW.seq || ' of partition ' || NEW.id
                          || ', which is not in audit_events with that hash',
                ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NULL;
    END;
    $$
    """,
]

# Databases built with ``create_all`` (tests) get the guards too.
for _statement in PG_AUDIT_GUARD_SQL:
    sa_event.listen(_EVENTS, "after_create", DDL(_statement).execute_if(dialect="postgresql"))
for _statement in [*PG_AUDIT_HEAD_GUARD_SQL, *PG_AUDIT_PARTITION_SQL]:
    # DDL %-formats its text; format()'s %I must survive that.
    sa_event.listen(_HEAD, "after_create", DDL(_statement.replace("%", "%%")).execute_if(dialect="postgresql"))

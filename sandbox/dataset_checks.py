"""Cross-reference checks of a dataset whose shape is already valid.

Each check returns ``path: message`` strings naming the offending JSON path,
e.g. ``orders[3].customer_id: unknown customer 'C-999'``. Checks: duplicate ids
per collection (and duplicate section ids within a document, duplicate emails
and Slack user ids), dangling references, currencies that differ from their
order's, delivery times that contradict the order status, return items not in
the order (or more than were ordered), refunds above the captured amount, and
times after ``as_of``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sandbox.dataset import Dataset, OrderRecord

ISO_COUNTRIES = frozenset(
    """AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ
    BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO
    DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU
    GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW
    KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU
    MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW
    PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF
    TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA
    ZM ZW""".split()
)


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


class _HasSlackUser(Protocol):
    @property
    def slack_user_id(self) -> str | None: ...
    @property
    def teams_user_id(self) -> str | None: ...


class _OrderMoney(Protocol):
    @property
    def order_id(self) -> str: ...
    @property
    def currency(self) -> str: ...


def _duplicates(name: str, rows: Sequence[_HasId]) -> list[str]:
    first: dict[str, int] = {}
    errors = []
    for i, row in enumerate(rows):
        if row.id in first:
            errors.append(f"{name}[{i}].id: duplicate id {row.id!r} (first at {name}[{first[row.id]}])")
        else:
            first[row.id] = i
    return errors


def _unique_ids(ds: Dataset) -> list[str]:
    errors: list[str] = []
    for name in (
        "customers",
        "orders",
        "payments",
        "refunds",
        "returns",
        "invoices",
        "knowledge",
        "staff",
        "outbox",
    ):
        errors += _duplicates(name, getattr(ds, name))
    methods: dict[str, str] = {}
    for ci, c in enumerate(ds.customers):
        for pi, pm in enumerate(c.payment_methods):
            path = f"customers[{ci}].payment_methods[{pi}].id"
            if pm.id in methods:
                errors.append(f"{path}: duplicate payment method id {pm.id!r} (first at {methods[pm.id]})")
            methods.setdefault(pm.id, path)
    for di, doc in enumerate(ds.knowledge):
        seen: set[str] = set()
        for si, sec in enumerate(doc.sections):
            if sec.id in seen:
                errors.append(f"knowledge[{di}].sections[{si}].id: duplicate section id {sec.id!r} in {doc.id!r}")
            seen.add(sec.id)
    return errors


def _unique_contacts(ds: Dataset) -> list[str]:
    errors: list[str] = []
    emails: dict[str, int] = {}
    slack: dict[str, str] = {}
    for i, c in enumerate(ds.customers):
        key = c.email.lower()
        if key in emails:
            errors.append(f"customers[{i}].email: duplicate email {c.email!r} (first at customers[{emails[key]}])")
        emails.setdefault(key, i)
    staff_emails: dict[str, int] = {}
    for i, m in enumerate(ds.staff):
        if m.email is None:
            continue
        key = m.email.lower()
        if key in staff_emails:
            errors.append(f"staff[{i}].email: duplicate email {m.email!r} (first at staff[{staff_emails[key]}])")
        staff_emails.setdefault(key, i)
    people: list[tuple[str, Sequence[_HasSlackUser]]] = [
        ("customers", ds.customers),
        ("staff", ds.staff),
    ]
    for name, rows in people:
        for i, row in enumerate(rows):
            if row.slack_user_id is None:
                continue
            path = f"{name}[{i}].slack_user_id"
            if row.slack_user_id in slack:
                errors.append(
                    f"{path}: duplicate Slack user {row.slack_user_id!r} (first at {slack[row.slack_user_id]})"
                )
            slack.setdefault(row.slack_user_id, path)
    teams: dict[str, str] = {}
    for name, rows in people:
        for i, row in enumerate(rows):
            if row.teams_user_id is None:
                continue
            path = f"{name}[{i}].teams_user_id"
            if row.teams_user_id in teams:
                errors.append(
                    f"{path}: duplicate Teams user {row.teams_user_id!r} (first at {teams[row.teams_user_id]})"
                )
            teams.setdefault(row.teams_user_id, path)
    return errors


def _order_refs(ds: Dataset, orders: dict[str, OrderRecord]) -> list[str]:
    errors: list[str] = []
    customers = {c.id for c in ds.customers}
    for i, o in enumerate(ds.orders):
        if o.customer_id not in customers:
            errors.append(f"orders[{i}].customer_id: unknown customer {o.customer_id!r}")
        if o.status == "DELIVERED" and o.delivered_at is None:
            errors.append(f"orders[{i}].delivered_at: required when status is DELIVERED")
        if o.status != "DELIVERED" and o.delivered_at is not None:
            errors.append(f"orders[{i}].delivered_at: only a DELIVERED order has a delivery time (status {o.status})")
        if o.delivered_at is not None and o.delivered_at < o.placed_at:
            errors.append(f"orders[{i}].delivered_at: before placed_at")
    money: list[tuple[str, Sequence[_OrderMoney]]] = [
        ("payments", ds.payments),
        ("refunds", ds.refunds),
        ("invoices", ds.invoices),
    ]
    for name, rows in money:
        for i, row in enumerate(rows):
            order = orders.get(row.order_id)
            if order is None:
                errors.append(f"{name}[{i}].order_id: unknown order {row.order_id!r}")
            elif row.currency != order.currency:
                errors.append(
                    f"{name}[{i}].currency: {row.currency!r} differs from order {order.id!r} "
                    f"currency {order.currency!r}"
                )
    for i, r in enumerate(ds.returns):
        if r.order_id not in orders:
            errors.append(f"returns[{i}].order_id: unknown order {r.order_id!r}")
    for i, m in enumerate(ds.outbox):
        if m.customer_id not in customers:
            errors.append(f"outbox[{i}].customer_id: unknown customer {m.customer_id!r}")
    return errors


def _return_items(ds: Dataset, orders: dict[str, OrderRecord]) -> list[str]:
    errors: list[str] = []
    returned: dict[tuple[str, str], int] = defaultdict(int)
    for i, r in enumerate(ds.returns):
        order = orders.get(r.order_id)
        if order is None:
            continue
        ordered: dict[str, int] = defaultdict(int)
        for line in order.items:
            ordered[line.sku] += line.qty
        for j, item in enumerate(r.items):
            path = f"returns[{i}].items[{j}]"
            if item.sku not in ordered:
                errors.append(f"{path}.sku: {item.sku!r} is not an item of order {order.id!r}")
                continue
            if r.status != "rejected":
                returned[(order.id, item.sku)] += item.qty
                if returned[(order.id, item.sku)] > ordered[item.sku]:
                    errors.append(
                        f"{path}.qty: returns of {item.sku!r} exceed the {ordered[item.sku]} ordered in {order.id!r}"
                    )
    return errors


def _refund_totals(ds: Dataset, orders: dict[str, OrderRecord]) -> list[str]:
    errors: list[str] = []
    captured: dict[str, int] = defaultdict(int)
    for p in ds.payments:
        if p.status in ("captured", "refunded"):
            captured[p.order_id] += p.amount_minor
    refunded: dict[str, int] = defaultdict(int)
    returns = {r.id: r for r in ds.returns}
    for i, rf in enumerate(ds.refunds):
        if rf.return_id is not None:
            ret = returns.get(rf.return_id)
            if ret is None:
                errors.append(f"refunds[{i}].return_id: unknown return {rf.return_id!r}")
            elif ret.order_id != rf.order_id:
                errors.append(
                    f"refunds[{i}].return_id: return {ret.id!r} is for order {ret.order_id!r}, not {rf.order_id!r}"
                )
        if rf.order_id not in orders:
            continue
        refunded[rf.order_id] += rf.amount_minor
        if refunded[rf.order_id] > captured[rf.order_id]:
            errors.append(
                f"refunds[{i}].amount_minor: refunds of order {rf.order_id!r} "
                f"total {refunded[rf.order_id]}, "
                f"more than the {captured[rf.order_id]} captured"
            )
    return errors


def _times(ds: Dataset) -> Iterable[tuple[str, datetime | None]]:
    for i, c in enumerate(ds.customers):
        yield f"customers[{i}].created_at", c.created_at
    for i, o in enumerate(ds.orders):
        yield f"orders[{i}].placed_at", o.placed_at
        yield f"orders[{i}].delivered_at", o.delivered_at
    for name, attr in (
        ("payments", "created_at"),
        ("refunds", "created_at"),
        ("returns", "created_at"),
        ("invoices", "issued_at"),
        ("outbox", "sent_at"),
    ):
        for i, row in enumerate(getattr(ds, name)):
            yield f"{name}[{i}].{attr}", getattr(row, attr)


def _not_after_as_of(ds: Dataset) -> list[str]:
    if ds.as_of is None:
        return []
    stamp = ds.as_of.isoformat().replace("+00:00", "Z")
    return [f"{path}: after as_of {stamp}" for path, t in _times(ds) if t is not None and t > ds.as_of]


def check_references(ds: Dataset) -> list[str]:
    """Every cross-reference problem in ``ds`` (empty when it is consistent)."""
    orders = {o.id: o for o in ds.orders}
    return [
        *_unique_ids(ds),
        *_unique_contacts(ds),
        *_order_refs(ds, orders),
        *_return_items(ds, orders),
        *_refund_totals(ds, orders),
        *_not_after_as_of(ds),
    ]

"""The runtime's collaborators, built once by the composition root."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from agent.executor import Executor
from agent.gatekeeper import Gatekeeper
from agent.knowledge import KnowledgeSearch
from agent.llm.base import ModelClient
from agent.notify import Notifier, RecordingNotifier
from agent.policy import Policy, load_policy
from agent.policy_versions import stored_version
from storage.approvals import ApprovalRepo
from storage.audit import AuditLog
from storage.conversations import ConversationRepo
from storage.db import Database
from storage.gates import ConfirmationRepo
from storage.handoffs import Handoffs
from storage.identities import IdentityLinks, People
from storage.inbox import Deliveries, Inbox
from storage.jobs import JobQueue
from storage.knowledge import Knowledge
from storage.ledger import Ledger
from storage.limits import UsageCounts
from storage.locks import Locks
from storage.records import wall_clock
from storage.thread_bindings import ThreadBindings
from tools.backend import CommerceBackend
from tools.catalogue import build_registry, supported_by
from tools.registry import Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Services:
    db: Database
    conversations: ConversationRepo
    confirmations: ConfirmationRepo
    approvals: ApprovalRepo
    ledger: Ledger
    #: Named locks (a customer's money actions one at a time).
    locks: Locks
    jobs: JobQueue
    audit: AuditLog
    registry: Registry
    policy: Policy
    gatekeeper: Gatekeeper
    executor: Executor
    backend: CommerceBackend
    notifier: Notifier
    model: ModelClient
    clock: Callable[[], datetime]
    #: What the faces accepted, their once-only deliveries and assist-thread bindings.
    inbox: Inbox
    deliveries: Deliveries
    bindings: ThreadBindings
    links: IdentityLinks
    #: Who a face's user or a staff id is (signoff's own directory, whatever the shop).
    people: People
    #: Signoff's own knowledge, what ``search_knowledge`` reads.
    knowledge: KnowledgeSearch
    #: What each principal used across conversations (the per-principal limits).
    usage: UsageCounts
    #: Every policy version this process has held or read, by version string (runs pin theirs).
    known_policies: dict[str, Policy] = field(default_factory=dict)
    #: Conversations handed to a person (``agent/handoff.py``).
    handoffs: Handoffs
    #: ``SIGNOFF_HANDOFF_SLA``: seconds before an unclaimed hand-off re-pages on-call.
    handoff_sla_s: float = 300.0

    def use_policy(self, policy: Policy) -> None:
        """Put ``policy`` in force (a newly applied version, ``agent.policy_refresher.PolicyRefresher``):
        every run started later reads it; a run already going keeps the version it started with
        (:meth:`pinned_policy`). The one field that changes after start, swapped together with
        the gatekeeper's."""
        self.known_policies.setdefault(self.policy.version, self.policy)
        self.known_policies[policy.version] = policy
        object.__setattr__(self, "policy", policy)
        self.gatekeeper.policy = policy

    async def pinned_policy(self, version: str) -> Policy:
        """The policy a run started with: one this process held, else the stored row of that version
        (a version string names one text: reuse with other content is refused). A version nowhere to
        be found (a run from before versions were recorded) is judged under the one in force."""
        if version == self.policy.version:
            return self.policy
        found = self.known_policies.get(version) or await stored_version(self.db, version)
        if found is None:
            log.warning(
                "policy version %s of a running run is not stored; it continues under %s", version, self.policy.version
            )
            return self.policy
        self.known_policies[version] = found
        return found


def build_services(
    *,
    db: Database,
    model: ModelClient,
    backend: CommerceBackend,
    policy: Policy | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] | None = None,
    handoff_sla_s: float = 300.0,
) -> Services:
    """The runtime's collaborators over ``db`` and the shop's ``backend`` (the composition root chooses it)."""
    clock = clock or wall_clock
    policy = policy or load_policy()
    registry = build_registry(supported_by(backend))
    jobs = JobQueue(db, clock=clock)
    confirmations = ConfirmationRepo(db)
    approvals = ApprovalRepo(db, jobs)
    ledger = Ledger(db, clock=clock)
    usage = UsageCounts(db)
    people = People(db, clock=clock)
    return Services(
        db=db,
        # Conversations, runs and proposals stay stamped with the real time: their rows are
        # ordered by those stamps, which a frozen test clock would tie.
        conversations=ConversationRepo(db),
        confirmations=confirmations,
        approvals=approvals,
        ledger=ledger,
        locks=Locks(db),
        jobs=jobs,
        audit=AuditLog(db),
        registry=registry,
        policy=policy,
        gatekeeper=Gatekeeper(
            registry=registry,
            policy=policy,
            confirmations=confirmations,
            approvals=approvals,
            usage=usage,
            people=people,
        ),
        executor=Executor(ledger),
        backend=backend,
        notifier=notifier or RecordingNotifier(),
        model=model,
        clock=clock,
        inbox=Inbox(db, jobs, clock=clock),
        deliveries=Deliveries(db, clock=clock),
        bindings=ThreadBindings(db, clock=clock),
        links=IdentityLinks(db, clock=clock),
        people=people,
        knowledge=KnowledgeSearch(Knowledge(db, clock=clock)),
        usage=usage,
        handoffs=Handoffs(db, clock=clock),
        handoff_sla_s=handoff_sla_s,
    )

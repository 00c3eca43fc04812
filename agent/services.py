"""The runtime's collaborators, built once by the composition root."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from agent.executor import Executor
from agent.gatekeeper import Gatekeeper
from agent.llm.base import ModelClient
from agent.notify import Notifier
from agent.policy import Policy
from storage.audit import AuditLog
from storage.conversations import ConversationRepo
from storage.db import Database
from storage.gates import ApprovalRepo, ConfirmationRepo
from storage.jobs import JobQueue
from storage.ledger import Ledger
from tools.backend import CommerceBackend
from tools.registry import Registry


@dataclass(frozen=True, kw_only=True)
class Services:
    db: Database
    conversations: ConversationRepo
    confirmations: ConfirmationRepo
    approvals: ApprovalRepo
    ledger: Ledger
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

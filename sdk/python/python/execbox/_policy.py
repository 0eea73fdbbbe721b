"""``Policy``: who runs, what they may call, how often, who approves, and the audit log."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Union

from execbox import _native


@dataclass(frozen=True)
class ApprovalRequest:
    """A call waiting for approval: the tool (``namespace.name``), its input (already checked
    against the tool's schema), the principal, the execution, and the input's SHA-256 over
    canonical JSON (lowercase hex): an approver that asks someone elsewhere shows it and
    checks the answer names it, so a yes given for one input never lets another run.

    When a rule of the policy file (``rules:``, docs/policy.md) sent the call for approval,
    ``rule`` names it (``"rules[1]"``, with its name when it has one) and ``reason`` is its
    reason; both are ``None`` when the tool's own ``requires_approval`` asked. ``approvers``
    are the roles or principals the rule names: only they may answer, so an approver that
    asks someone must check who answers (empty: whoever the policy lets approve)."""

    tool: str
    input: Any
    principal: Optional[str]
    execution_id: str
    input_sha256: str
    rule: Optional[str] = None
    reason: Optional[str] = None
    approvers: List[str] = field(default_factory=list)


Approve = Callable[[ApprovalRequest], Any]
"""Decides a call: returns ``True`` to let it run (anything else, or an exception, is a
no). May be ``async def``; it runs on a thread of its own and may wait for a person."""

PathLike = Union[str, "os.PathLike[str]"]


class Policy:
    """The policy of the executions given it (``run(..., policy=)``, ``Sandbox(policy=)``).

    ``path`` is a policy file (docs/policy.md): principals, roles, permissions, rules on a
    call's arguments, the audit log and the rate-limit state. Without one, every tool is
    permitted and rate limits are counted in memory. ``principal`` is who runs (a principal of
    the file). ``approve`` decides the calls of tools that require approval and those a rule
    sends for approval; without it they are refused ("approval required").
    ``audit_log`` and ``state`` override the file's; each is a file or a ``postgres://`` URL.
    Rate-limit counters are shared by every execution given this policy (and, with ``state``,
    by every process using that file or database).
    """

    def __init__(
        self,
        path: Optional[PathLike] = None,
        *,
        principal: Optional[str] = None,
        approve: Optional[Approve] = None,
        audit_log: Optional[PathLike] = None,
        state: Optional[PathLike] = None,
    ) -> None:
        if approve is not None and not callable(approve):
            raise TypeError(f"Policy(approve=...) must be a callable, not {type(approve).__name__}")
        self._native = _native.NativePolicy(
            None if path is None else os.fspath(path),
            principal,
            None if audit_log is None else os.fspath(audit_log),
            None if state is None else os.fspath(state),
            None if approve is None else _approver(approve),
        )
        self.principal = principal


def _approver(
    approve: Approve,
) -> Callable[
    [str, str, Optional[str], str, str, Optional[str], Optional[str], List[str]], bool
]:
    def decide(
        tool: str,
        input_json: str,
        principal: Optional[str],
        execution_id: str,
        input_sha256: str,
        rule: Optional[str] = None,
        reason: Optional[str] = None,
        approvers: Optional[List[str]] = None,
    ) -> bool:
        request = ApprovalRequest(
            tool,
            json.loads(input_json),
            principal,
            execution_id,
            input_sha256,
            rule,
            reason,
            list(approvers or ()),
        )
        answer = approve(request)
        if inspect.isawaitable(answer):
            answer = asyncio.run(_wait(answer))
        return answer is True

    return decide


async def _wait(awaitable: Any) -> Any:
    return await awaitable

"""execbox.Policy: permissions, rate limits, approvals and the audit log over Python tools."""

from __future__ import annotations

import hashlib
import json

import pytest

import execbox

CATCH = "try { return await %s } catch (e) { return [e.code, e.reason, e.message, e.retryAfterMs] }"


def test_a_rate_limit_admits_its_calls_then_refuses_with_a_retry_time():
    calls = []
    tool = execbox.Tool(lambda input: calls.append(input) or len(calls), rate_limit="2 per 1m")
    policy = execbox.Policy()
    with execbox.Sandbox({"api": {"hit": tool}}, policy=policy, pool=1) as sb:
        assert sb.run("return await api.hit({})").value == 1
        assert sb.run("return await api.hit({})").value == 2
        code, reason, message, retry = sb.run(CATCH % "api.hit({})").value
    assert (code, reason) == ("tool_error", "rate_limited")
    assert "api.hit" in message
    assert retry > 0
    assert len(calls) == 2


def test_a_guarded_tool_without_a_policy_is_refused_not_run_unguarded():
    calls = []
    tool = execbox.Tool(lambda input: calls.append(input), rate_limit="2 per 1m")
    code, _, message, _ = execbox.run(CATCH % "api.hit({})", {"api": {"hit": tool}}).value
    assert code == "tool_error"
    assert calls == []
    # What to do is said the Python way, not the Rust library's.
    assert message == (
        "api.hit: this tool has a rate limit, and this execution has no policy to enforce "
        "that, so the call was refused; give run(), run_async() or Sandbox() a "
        "policy=execbox.Policy(...) (with approve= to decide the calls of tools that require "
        "approval)"
    )


def test_permissions_come_from_the_policy_file(tmp_path):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "version: 1\n"
        "principals:\n"
        "  alice: { permissions: ['weather:read'] }\n"
        "  bob: { permissions: [] }\n"
    )
    tool = execbox.Tool(lambda input: "sunny", permissions=["weather:read"])
    tools = {"weather": {"today": tool}}
    alice = execbox.Policy(policy_file, principal="alice")
    bob = execbox.Policy(policy_file, principal="bob")
    assert execbox.run("return await weather.today()", tools, policy=alice).value == "sunny"
    # A tool the principal may not call is not there at all.
    hidden = execbox.run("return typeof weather", tools, policy=bob).value
    assert hidden == "undefined"
    with pytest.raises(ValueError, match="carol"):
        execbox.Policy(policy_file, principal="carol")


def test_an_approver_decides_each_call_and_a_denial_never_runs_the_tool():
    sent = []
    asked = []

    def approve(request: execbox.ApprovalRequest) -> bool:
        asked.append(request)
        return request.input["to"].endswith("@example.com")

    send = execbox.Tool(lambda input: sent.append(input["to"]) or "sent", requires_approval=True)
    policy = execbox.Policy(approve=approve)
    tools = {"mail": {"send": send}}
    ok = execbox.run("return await mail.send({ to: 'a@example.com' })", tools, policy=policy)
    assert ok.value == "sent"
    code, reason, _, _ = execbox.run(CATCH % "mail.send({ to: 'x@evil.test' })", tools, policy=policy).value
    assert (code, reason) == ("tool_error", "approval_denied")
    assert sent == ["a@example.com"]
    assert [r.tool for r in asked] == ["mail.send", "mail.send"]
    assert asked[1].input == {"to": "x@evil.test"}
    # The digest a durable execution shows as inputSha256: canonical JSON, sorted and compact.
    canonical = json.dumps(asked[1].input, sort_keys=True, separators=(",", ":"))
    assert asked[1].input_sha256 == hashlib.sha256(canonical.encode()).hexdigest()
    assert asked[0].input_sha256 != asked[1].input_sha256
    # Asked by the tool's own requires_approval, not by a rule of a policy file.
    assert (asked[1].rule, asked[1].reason, asked[1].approvers) == (None, None, [])


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_without_an_approver_approval_is_required_and_an_approver_that_raises_says_no():
    send = execbox.Tool(lambda input: "sent", requires_approval=True)
    tools = {"mail": {"send": send}}
    none = execbox.run(CATCH % "mail.send({})", tools, policy=execbox.Policy()).value
    assert none[1] == "approval_required"

    def broken(request):
        raise RuntimeError("approver down")

    raised = execbox.run(CATCH % "mail.send({})", tools, policy=execbox.Policy(approve=broken)).value
    assert raised[1] == "approval_denied"


def test_the_audit_log_records_each_call(tmp_path):
    audit = tmp_path / "audit.jsonl"
    policy = execbox.Policy(audit_log=audit)
    execbox.run("await t.echo({ n: 1 })", {"t": {"echo": lambda input: input}}, policy=policy)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any("t.echo" in json.dumps(line) for line in lines)


def test_a_bad_rate_limit_names_the_tool():
    with pytest.raises(ValueError, match=r"tools\[\"api\"\]\[\"hit\"\].rate_limit"):
        execbox.run("1", {"api": {"hit": execbox.Tool(lambda i: 1, rate_limit="lots")}})
    with pytest.raises(TypeError, match="policy must be an execbox.Policy"):
        execbox.run("1", policy="policy.yaml")


def test_slow_approvers_left_waiting_are_bounded_and_an_honest_sync_call_still_runs():
    import threading

    release = threading.Event()
    asked = []

    def approve(request):
        asked.append(request)
        # A person who does not answer; bounded so a failing test still ends.
        return release.wait(30)

    send = execbox.Tool(lambda input: "sent", requires_approval=True)
    tools = {"mail": {"send": send}, "t": {"honest": lambda input: 1}}
    policy = execbox.Policy(approve=approve)
    # Each execution that times out leaves up to 16 approvers waiting (the host's concurrency
    # per execution): a thread running Python cannot be stopped.
    hostile = "for (let i = 0; i < 64; i++) mail.send({}); await mail.send({})"
    runs = 0
    while len(asked) < 256 and runs < 64:
        execbox.run(hostile, tools, policy=policy, timeout_ms=100)
        runs += 1
    assert len(asked) >= 256, f"only {len(asked)} approvers were asked in {runs} executions"
    try:
        # 352 approvals asked for in all: more than the blocking threads left for tools.
        for _ in range(6):
            execbox.run(hostile, tools, policy=policy, timeout_ms=100)
        honest = execbox.run("return await t.honest({})", tools, policy=policy, timeout_ms=10_000)
        assert honest.error is None and honest.value == 1, honest.error
        code, reason, message, _ = execbox.run(
            CATCH % "mail.send({})", tools, policy=policy, timeout_ms=10_000
        ).value
        assert (code, reason) == ("tool_error", "approval_denied")
        assert "256 approvals are already waiting for Python approvers" in message
    finally:
        release.set()
    # Once the approvers return, approvals are asked again.
    for _ in range(200):
        if execbox.run("return await mail.send({})", tools, policy=policy).value == "sent":
            break
        threading.Event().wait(0.02)
    assert execbox.run("return await mail.send({})", tools, policy=policy).value == "sent"


PAYMENT_RULES = """\
version: 1
roles: { finance: { permissions: ["executions:approve"] } }
principals: { alice: {}, carol: { roles: [finance] } }
rules:
  - tool: "pay.send"
    when: "input.amount > 1000000"
    action: block
    reason: "payments over a million are made by hand"
  - tool: "pay.send"
    when: "input.amount > 100"
    action: approve
    reason: "payments over 100"
  - tool: "pay.refund"
    action: allow
"""

PAYMENT_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
    "required": ["to"],
}


def payments(sent):
    def send(input):
        sent.append(("send", input["amount"], input["to"]))
        return "sent"

    def refund(input):
        sent.append(("refund", input["amount"], input["to"]))
        return "refunded"

    return {
        "pay": {
            "send": execbox.Tool(send, input_schema=PAYMENT_SCHEMA),
            "refund": execbox.Tool(refund, input_schema=PAYMENT_SCHEMA, requires_approval=True),
        }
    }


def payment_policy(tmp_path, asked, answer, rules=PAYMENT_RULES):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(rules)

    def approve(request: execbox.ApprovalRequest) -> bool:
        asked.append(request)
        return answer

    return execbox.Policy(policy_file, principal="alice", approve=approve)


def test_a_payment_no_rule_matches_runs_without_asking(tmp_path):
    sent, asked = [], []
    policy = payment_policy(tmp_path, asked, answer=False)
    ran = execbox.run("return await pay.send({ amount: 50, to: 'bob' })", payments(sent), policy=policy)
    assert ran.value == "sent", ran.error
    assert sent == [("send", 50, "bob")]
    assert asked == []


def test_a_rule_sends_a_large_payment_for_approval_with_its_name_and_reason(tmp_path):
    sent, asked = [], []
    tools = payments(sent)
    yes = payment_policy(tmp_path, asked, answer=True)
    ran = execbox.run("return await pay.send({ amount: 500, to: 'bob' })", tools, policy=yes)
    assert ran.value == "sent", ran.error
    assert len(asked) == 1
    request = asked[0]
    assert (request.tool, request.input) == ("pay.send", {"amount": 500, "to": "bob"})
    assert request.principal == "alice"
    assert (request.rule, request.reason, request.approvers) == ("rules[1]", "payments over 100", [])

    no = payment_policy(tmp_path, asked, answer=False)
    code, reason, message, _ = execbox.run(
        CATCH % "pay.send({ amount: 700, to: 'mallory' })", tools, policy=no
    ).value
    assert (code, reason) == ("tool_error", "approval_denied")
    assert "pay.send" in message
    assert len(asked) == 2 and asked[1].rule == "rules[1]"
    assert sent == [("send", 500, "bob")]


def test_a_rule_naming_approvers_passes_them_to_the_approver(tmp_path):
    rules = PAYMENT_RULES.replace(
        '    reason: "payments over 100"\n',
        '    reason: "payments over 100"\n    approvers: [finance, carol]\n',
    )
    assert "approvers: [finance, carol]" in rules
    sent, asked = [], []
    policy = payment_policy(tmp_path, asked, answer=True, rules=rules)
    ran = execbox.run("return await pay.send({ amount: 500, to: 'bob' })", payments(sent), policy=policy)
    assert ran.value == "sent", ran.error
    assert [(r.rule, r.reason, r.approvers) for r in asked] == [
        ("rules[1]", "payments over 100", ["finance", "carol"])
    ]


def test_a_rule_blocks_a_huge_payment_without_asking(tmp_path):
    sent, asked = [], []
    tools = payments(sent)
    policy = payment_policy(tmp_path, asked, answer=True)
    code, reason, message, _ = execbox.run(
        CATCH % "pay.send({ amount: 5000000, to: 'bob' })", tools, policy=policy
    ).value
    assert (code, reason) == ("tool_error", "blocked")
    assert message == (
        "pay.send: blocked by policy rules[0]: payments over a million are made by hand"
    )
    # Uncaught, the result's error says the same.
    error = execbox.run("return await pay.send({ amount: 5000000, to: 'bob' })", tools, policy=policy).error
    assert error is not None and error.reason == "blocked"
    assert "payments over a million are made by hand" in error.message
    # A condition that cannot be evaluated (no amount) blocks too: it never lets a call through.
    code, reason, message, _ = execbox.run(CATCH % "pay.send({ to: 'bob' })", tools, policy=policy).value
    assert (code, reason) == ("tool_error", "blocked")
    assert "rules[0]" in message
    assert sent == []
    assert asked == []


def test_an_allow_rule_runs_a_tool_that_requires_approval_without_asking(tmp_path):
    sent, asked = [], []
    tools = payments(sent)
    policy = payment_policy(tmp_path, asked, answer=False)
    ran = execbox.run("return await pay.refund({ amount: 5000, to: 'bob' })", tools, policy=policy)
    assert ran.value == "refunded", ran.error
    assert sent == [("refund", 5000, "bob")]
    assert asked == []
    # Without the rule, the tool's own requires_approval asks (and this approver says no).
    plain = execbox.Policy(approve=lambda request: asked.append(request) or False)
    code, reason, _, _ = execbox.run(CATCH % "pay.refund({ amount: 5, to: 'bob' })", tools, policy=plain).value
    assert (code, reason) == ("tool_error", "approval_denied")
    assert [(r.tool, r.rule) for r in asked] == [("pay.refund", None)]

"""execbox.OpenAPI: an OpenAPI document's operations as tools, against a real local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

import execbox

SECRET = "s3cr3t-planted-token-4b1d"
TOKEN_ENV = "EXECBOX_TEST_PETS_TOKEN"

DOCUMENT = {
    "openapi": "3.0.3",
    "info": {"title": "Pets", "version": "1", "description": "A small pet store."},
    "paths": {
        "/pets": {
            "get": {
                "operationId": "listPets",
                "summary": "List pets",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}}
                ],
                "responses": {"200": {"description": "pets"}},
            },
            "post": {
                "operationId": "createPet",
                "summary": "Create a pet",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}},
                            }
                        }
                    },
                },
                "responses": {"201": {"description": "created"}},
            },
        },
        "/pets/{petId}": {
            "get": {
                "operationId": "getPet",
                "summary": "One pet",
                "parameters": [
                    {"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "a pet"}},
            }
        },
        "/echo": {
            "get": {
                "operationId": "echoHeaders",
                "summary": "The request's headers, as the server saw them",
                "responses": {"200": {"description": "headers"}},
            }
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {
                    "content": {"multipart/form-data": {"schema": {"type": "object"}}}
                },
                "responses": {"200": {"description": "ok"}},
            }
        },
    },
}


class _Api(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        url = urlsplit(self.path)
        if url.path == "/pets":
            limit = int(parse_qs(url.query).get("limit", ["10"])[0])
            self._answer(200, [{"id": str(i), "name": f"pet{i}"} for i in range(limit)])
        elif url.path == "/echo":
            self._answer(200, dict(self.headers.items()))
        elif url.path.startswith("/pets/"):
            pet = url.path[len("/pets/"):]
            if pet == "404":
                self._answer(404, {"message": "no such pet"})
            else:
                self._answer(200, {"id": pet, "name": "Rex"})
        else:
            self._answer(404, {"message": "no route"})

    def do_POST(self):
        self.seen.append(self.headers.get("Authorization"))
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"null")
        self._answer(201, {"created": body, "type": self.headers.get("Content-Type")})


@pytest.fixture
def server():
    _Api.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "pets.json"
    path.write_text(json.dumps(DOCUMENT))
    return path


@pytest.fixture
def pets(server, document, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    with pytest.warns(UserWarning, match=r"1 operation\(s\) left out: POST /upload: .*multipart"):
        return execbox.OpenAPI(
            document, base_url=server, auth={"bearer": {"env": TOKEN_ENV}}, timeout_ms=5000
        )


PROGRAM = """
const pet = await pets.getPet({ petId: "7" });
const list = await pets.listPets({ limit: 2 });
const made = await pets.createPet({ body: { name: "Tom" } });
const echoed = await pets.echoHeaders();
console.log("echoed", JSON.stringify(echoed));
let failed;
try { await pets.getPet({ petId: "404" }); } catch (e) {
  failed = { code: e.code, reason: e.reason, message: e.message };
  console.log("failed", e.message);
}
return { pet, list, made, failed, auth: echoed.authorization ?? echoed.Authorization };
"""


def test_a_program_calls_operations_and_the_token_stays_on_the_host(pets, tmp_path):
    audit = tmp_path / "audit.jsonl"
    policy = execbox.Policy(audit_log=audit)
    with execbox.Sandbox({"pets": pets}, pool=1, policy=policy) as sb:
        result = sb.run(PROGRAM)
        types = sb.types()
        prompt = sb.prompt()
    assert result.ok, result.error
    value = result.value
    assert value["pet"] == {"id": "7", "name": "Rex"}
    assert value["list"] == [{"id": "0", "name": "pet0"}, {"id": "1", "name": "pet1"}]
    assert value["made"] == {"created": {"name": "Tom"}, "type": "application/json"}
    failed = value["failed"]
    assert (failed["code"], failed["reason"]) == ("tool_error", "http_status")
    assert "404" in failed["message"] and "no such pet" in failed["message"]
    # The token reached the server with every call, and the program saw it redacted.
    assert _Api.seen and all(seen == f"Bearer {SECRET}" for seen in _Api.seen)
    assert value["auth"] == "Bearer [redacted]"
    # The declarations name the operations, with what the document says of them.
    for name in ("getPet", "listPets", "createPet", "echoHeaders", "List pets"):
        assert name in types
    assert "upload" not in types
    # The planted secret is nowhere: the result, its logs and errors, the declarations, the
    # prompt, the audit log.
    everything = [repr(result), json.dumps(value), *result.logs, types, prompt]
    everything.append(audit.read_text())
    assert "getPet" in everything[-1], "the policy audits OpenAPI calls as any tool's"
    for text in everything:
        assert SECRET not in text


def test_run_types_and_a_failing_program_keep_the_secret_too(pets):
    result = execbox.run(
        'await pets.getPet({ petId: "404" })', {"pets": pets}, timeout_ms=10_000
    )
    assert not result.ok
    assert (result.error.code, result.error.reason) == ("tool_error", "http_status")
    assert "HTTP 404" in result.error.message
    assert "GET /pets/{petId}" in result.error.message
    assert SECRET not in str(result.error) and SECRET not in repr(result)
    assert "getPet" in execbox.types({"pets": pets})
    assert pets.operations == ["listPets", "createPet", "getPet", "echoHeaders"]
    assert pets.skipped[0][0] == "POST /upload"


def test_input_is_checked_against_the_operation_schema(pets):
    result = execbox.run('return await pets.getPet({ id: "7" })', {"pets": pets})
    assert result.error.code == "validation_error"
    assert _Api.seen == []


def test_a_relative_document_path_resolves_against_the_working_directory(
    server, document, monkeypatch
):
    monkeypatch.chdir(document.parent)
    api = execbox.OpenAPI("pets.json", base_url=server, operations={"include": ["getPet"]})
    assert api.operations == ["getPet"]
    result = execbox.run('return await pets.getPet({ petId: "1" })', {"pets": api})
    assert result.value == {"id": "1", "name": "Rex"}
    assert _Api.seen == [None]


def test_a_namespace_may_mix_with_python_tools(pets):
    tools = {"pets": pets, "math": {"double": lambda input: input["n"] * 2}}
    code = 'const p = await pets.getPet({ petId: "3" }); return await math.double({ n: Number(p.id) })'
    assert execbox.run(code, tools).value == 6


def test_bad_configurations_raise_errors_naming_the_field(document, monkeypatch):
    monkeypatch.delenv("EXECBOX_TEST_SURELY_UNSET", raising=False)
    base = "http://127.0.0.1:9"

    def error_of(**kwargs):
        with pytest.raises(ValueError) as raised:
            execbox.OpenAPI(document, base_url=base, **kwargs)
        message = str(raised.value)
        assert message.startswith("execbox.OpenAPI: "), message
        # People and models read these: no Rust type names.
        for rust in ("struct", "enum ", "OpenApiConfig", "AuthConfig", "Secret"):
            assert rust not in message, message
        return message

    message = error_of(auth={"bearer": {"environment": "X"}})
    assert message == (
        "execbox.OpenAPI: auth.bearer: unknown kind `environment` (expected one of `env`, `file`)"
    )
    message = error_of(auth={"token": {"env": "X"}})
    assert "auth" in message and "token" in message and "bearer" in message
    message = error_of(auth={"bearer": {"env": "EXECBOX_TEST_SURELY_UNSET"}})
    assert message == (
        "execbox.OpenAPI: auth.bearer: the environment variable EXECBOX_TEST_SURELY_UNSET is "
        "not set; export it, or give the secret as `file: PATH`"
    )
    message = error_of(operations={"includes": ["x"]})
    assert "operations" in message and "did you mean `include`?" in message
    message = error_of(operations="getPet")
    assert message.startswith("execbox.OpenAPI: operations: "), message
    message = error_of(timeout_ms=0)
    assert "timeout_ms" in message and "from 1" in message
    with pytest.raises(ValueError, match="cannot read the OpenAPI document"):
        execbox.OpenAPI(document.parent / "missing.json", base_url=base)
    with pytest.raises(TypeError, match="timeout"):
        execbox.OpenAPI(document, timeout=5)  # type: ignore[call-arg]
    # A secret is named, never written: a token given as a value is refused, saying how.
    for auth in (
        {"bearer": SECRET},
        {"bearer": {"value": SECRET}},
        {"basic": {"username": {"env": "U"}, "password": SECRET}},
        {"api_key": {"in": "header", "name": "X-Key", "value": SECRET}},
        {"oauth2_client_credentials": {"token_url": base, "client_id": "a", "client_secret": SECRET}},
    ):
        message = error_of(auth=auth)
        assert "a secret is named here, never written" in message, message
        assert SECRET not in message


def test_policy_requirements_apply_to_every_operation(server, document):
    asked = []

    def approve(request):
        asked.append(request)
        return request.input.get("petId") != "13"

    api = execbox.OpenAPI(
        document,
        base_url=server,
        operations={"exclude": ["upload"]},
        requires_approval=True,
        rate_limit={"requests": 2, "window": "1h"},
        description="Pets, approved one call at a time",
    )
    program = (
        'const ok = await pets.getPet({ petId: "1" });'
        'try { await pets.getPet({ petId: "13" }) } catch (e) { return [ok, e.code, e.reason] }'
    )
    with execbox.Sandbox({"pets": api}, pool=1, policy=execbox.Policy(approve=approve)) as sb:
        assert sb.run(program).value == [{"id": "1", "name": "Rex"}, "tool_error", "approval_denied"]
        assert "Pets, approved one call at a time" in sb.types()
        # Two calls per hour of each operation: the third is refused.
        limited = sb.run(
            "for (let i = 0; i < 3; i++) {"
            "  try { await pets.listPets({ limit: 1 }) } catch (e) { return [i, e.code, e.reason] }"
            "}"
        )
        assert limited.value == [2, "tool_error", "rate_limited"]
    assert [r.tool for r in asked][:2] == ["pets.getPet", "pets.getPet"]
    assert _Api.seen == [None, None, None]
    # Without a policy the calls are refused, not run unguarded.
    refused = execbox.run('return await pets.getPet({ petId: "1" })', {"pets": api})
    assert refused.error.code == "tool_error" and "policy" in refused.error.message
    assert len(_Api.seen) == 3
    with pytest.raises(ValueError, match=r"^execbox\.OpenAPI: rate_limit: "):
        execbox.OpenAPI(document, base_url=server, rate_limit="often")
    with pytest.raises(ValueError, match=r"^execbox\.OpenAPI: permissions: "):
        execbox.OpenAPI(document, base_url=server, permissions=["has space"])

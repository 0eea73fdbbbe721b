"""``OpenAPI``: an OpenAPI 3.0/3.1 document's operations as tools, called by the host over HTTP."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from execbox import _native

PathLike = Union[str, "os.PathLike[str]"]


class OpenAPI:
    """The operations of an OpenAPI 3.0 or 3.1 document as tools: one tool per operation,
    each call an HTTP request the host makes, with credentials the program never sees.

    Give it as a namespace of ``tools``: ``tools={"github": execbox.OpenAPI("github.json",
    auth={"bearer": {"env": "GITHUB_TOKEN"}})}`` lets a program ``await
    github.issues_get({...})``. The arguments are the fields of a tools file's OpenAPI provider
    (docs/openapi.md), read the same way: ``openapi`` is the document's path (JSON or YAML) or
    URL, and relative paths (the document, ``{"file": ...}`` secrets) resolve against the current
    working directory when the ``OpenAPI`` is made. ``auth`` is a dict shaped as in the tools
    file (``{"bearer": {"env": "TOKEN"}}``, ``{"api_key": {"in": "header", "name": "X-Key",
    "env": "KEY"}}``, ``{"basic": {...}}``, ``{"oauth2_client_credentials": {...}}``);
    secrets are named (``{"env": NAME}`` or ``{"file": PATH}``), never written.

    As for any tool (``Tool(...)``) and any provider of a tools file, ``permissions``,
    ``rate_limit`` (``"100 per 1h"``, or ``{"requests": 100, "window": "1h"}`` as a tools file
    writes it) and ``requires_approval`` apply to every operation and need a ``Policy``;
    ``description`` replaces the document's title as the namespace's description.

    The document and the secrets are read here, once: a bad field, an unset variable or a
    document execbox cannot use raises ``ValueError`` naming the field. Operations left out
    (an unsupported body, a broken ``$ref``) are listed in ``skipped`` as ``(operation,
    reason)`` and reported with a ``UserWarning``. One ``OpenAPI`` may be given to several
    sandboxes; they share its HTTP client (and an OAuth2 token).
    """

    __slots__ = ("_native", "skipped", "operations")

    def __init__(
        self,
        openapi: PathLike,
        *,
        base_url: Optional[str] = None,
        auth: Optional[Mapping[str, Any]] = None,
        operations: Optional[Mapping[str, List[str]]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        max_response_bytes: Optional[int] = None,
        description: Optional[str] = None,
        permissions: Optional[List[str]] = None,
        rate_limit: Optional[Union[str, Mapping[str, Any]]] = None,
        requires_approval: bool = False,
    ) -> None:
        if not isinstance(openapi, (str, os.PathLike)):
            raise TypeError(
                f"OpenAPI(openapi=...) must be the document's path or URL (a str), "
                f"not {type(openapi).__name__}"
            )
        config: Dict[str, Any] = {"openapi": os.fspath(openapi)}
        given = (
            ("base_url", base_url),
            ("auth", auth),
            ("operations", operations),
            ("headers", headers),
            ("timeout_ms", timeout_ms),
            ("max_response_bytes", max_response_bytes),
            ("description", description),
            ("permissions", permissions),
            ("rate_limit", rate_limit),
            ("requires_approval", requires_approval or None),
        )
        for field, value in given:
            if value is not None:
                config[field] = value
        try:
            text = json.dumps(config, allow_nan=False, indent=1)
        except (TypeError, ValueError) as e:
            raise TypeError(f"execbox.OpenAPI: the configuration is not JSON: {e}") from None
        self._native = _native.NativeOpenApi(text, os.getcwd())
        self.skipped: List[Tuple[str, str]] = list(self._native.skipped)
        """``(operation, reason)`` of each operation that is not a tool."""
        self.operations: List[str] = list(self._native.operations)
        """The operations that are tools, named as the document names them."""
        if self.skipped:
            listed = "; ".join(f"{op}: {why}" for op, why in self.skipped)
            warnings.warn(
                f"execbox.OpenAPI({config['openapi']!r}): {len(self.skipped)} operation(s) "
                f"left out: {listed}",
                UserWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        return f"<execbox.OpenAPI {len(self.operations)} operations>"

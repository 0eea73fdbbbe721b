"""Type stubs of the extension module (private: use the ``execbox`` package)."""

from typing import Any, Callable, List, Optional, Tuple

class NativeTools:
    def __init__(
        self,
        specs: List[Tuple[Tuple[str, str, Any, bool, Optional[str], Optional[str], Optional[str]], Tuple[List[str], Optional[str], bool]]],
        openapi: List[Tuple[str, NativeOpenApi]] = ...,
    ) -> None: ...
    def is_empty(self) -> bool: ...

class NativeOpenApi:
    def __init__(self, config_json: str, base_dir: str) -> None: ...
    @property
    def skipped(self) -> List[Tuple[str, str]]: ...
    @property
    def operations(self) -> List[str]: ...

class NativePolicy:
    def __init__(
        self,
        path: Optional[str] = None,
        principal: Optional[str] = None,
        audit_log: Optional[str] = None,
        state: Optional[str] = None,
        approve: Optional[
            Callable[
                [str, str, Optional[str], str, str, Optional[str], Optional[str], List[str]],
                bool,
            ]
        ] = None,
    ) -> None: ...

class Running:
    def cancel(self) -> None: ...

class NativePool:
    def __init__(self, argv: List[str], size: int, prewarm: bool, overflow: bool) -> None: ...
    def run(
        self,
        tools: NativeTools,
        code: str,
        timeout_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        max_log_lines: Optional[int] = None,
        max_log_chars: Optional[int] = None,
        event_loop: Any = None,
        policy: Optional[NativePolicy] = None,
    ) -> tuple: ...
    def start(
        self,
        tools: NativeTools,
        code: str,
        callback: Callable[[tuple], None],
        timeout_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        max_log_lines: Optional[int] = None,
        max_log_chars: Optional[int] = None,
        event_loop: Any = None,
        policy: Optional[NativePolicy] = None,
    ) -> Running: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def runners_started(self) -> int: ...

def serve_runner() -> None: ...
def declarations(tools: NativeTools) -> str: ...
def prompt(
    tools: NativeTools,
    timeout_ms: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    max_log_lines: Optional[int] = None,
    max_log_chars: Optional[int] = None,
) -> str: ...
def code_tool_description(
    tools: NativeTools,
    max_answer_chars: int,
    timeout_ms: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    max_log_lines: Optional[int] = None,
    max_log_chars: Optional[int] = None,
) -> str: ...
def model_answer(
    value_json: Optional[str],
    error: Optional[Tuple[str, str]],
    logs: List[str],
    max_chars: int,
) -> str: ...
def shutdown() -> None: ...

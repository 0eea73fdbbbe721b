//! The replayer: drives one transcript over one fresh session and reports the first divergence.

use std::fmt;
use std::thread;
use std::time::Duration;

use crate::json::{self, preview, PREVIEW_CHARS};
use crate::matcher::{check, CallIds};
use crate::transcript::{Action, Expected, RawObject, Transcript};
use crate::transport::{Connection, Exit, Received, Transport};

/// How long a `recv` waits when no `expect_within_ms` bounds it.
pub const DEFAULT_RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// Lets the stderr reader catch up before a failure report takes the tail.
const STDERR_SETTLE: Duration = Duration::from_millis(50);

/// Why a transcript failed: the line, what was expected, what the runner did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// 1-based transcript line of the failing step; `None` before the first step (connecting).
    pub line: Option<usize>,
    /// What went wrong, e.g. `at error.code: expected "timeout", got "runtime_error"`.
    pub reason: String,
    /// The expected message as compact JSON, cut to about 500 characters.
    pub expected: Option<String>,
    /// The runner's message, cut to about 500 characters.
    pub actual: Option<String>,
    /// The last lines of the runner's stderr (stdio only).
    pub stderr: Option<String>,
}

impl Failure {
    fn at(line: usize, reason: impl Into<String>) -> Failure {
        Failure {
            line: Some(line),
            reason: reason.into(),
            expected: None,
            actual: None,
            stderr: None,
        }
    }

    fn expecting(mut self, expected: &Expected) -> Failure {
        self.expected = Some(preview(expected.text(), PREVIEW_CHARS));
        self
    }

    fn got(mut self, actual: &str) -> Failure {
        self.actual = Some(preview(actual, PREVIEW_CHARS));
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.reason)?,
            None => f.write_str(&self.reason)?,
        }
        if let Some(expected) = &self.expected {
            write!(f, "\n  expected: {expected}")?;
        }
        if let Some(actual) = &self.actual {
            write!(f, "\n  actual:   {actual}")?;
        }
        if let Some(stderr) = &self.stderr {
            f.write_str("\n  runner stderr (tail):")?;
            for line in stderr.lines() {
                write!(f, "\n    | {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// Replays transcripts; [`replay`] uses the defaults.
#[derive(Debug, Clone)]
pub struct Replayer {
    /// Bound of a `recv` without `expect_within_ms`. Default [`DEFAULT_RECV_TIMEOUT`].
    pub recv_timeout: Duration,
}

impl Default for Replayer {
    fn default() -> Self {
        Replayer {
            recv_timeout: DEFAULT_RECV_TIMEOUT,
        }
    }
}

/// Replays `transcript` over a fresh session of `transport` with the default settings.
pub fn replay(transcript: &Transcript, transport: &dyn Transport) -> Result<(), Failure> {
    Replayer::default().replay(transcript, transport)
}

impl Replayer {
    /// Opens a session, plays every step, and returns the first divergence.
    ///
    /// Runs on its own thread with a large stack, so deeply nested messages cannot overflow it.
    pub fn replay(
        &self,
        transcript: &Transcript,
        transport: &dyn Transport,
    ) -> Result<(), Failure> {
        json::with_big_stack(|| {
            let mut conn = transport.connect().map_err(|e| Failure {
                line: None,
                reason: format!("cannot open a session with the runner: {e}"),
                expected: None,
                actual: None,
                stderr: None,
            })?;
            self.play(transcript, conn.as_mut()).map_err(|mut failure| {
                thread::sleep(STDERR_SETTLE);
                failure.stderr = conn.stderr_tail();
                failure
            })
        })
    }

    fn play(&self, transcript: &Transcript, conn: &mut dyn Connection) -> Result<(), Failure> {
        let mut ids = CallIds::default();
        let mut within: Option<Duration> = None;
        let mut closed = false;
        let mut last_line = 0;
        for step in &transcript.steps {
            let line = step.line;
            last_line = line;
            match &step.action {
                Action::Send { text, call_id } => {
                    let runner_id = call_id.as_deref().and_then(|c| ids.runner_id(c));
                    let text = match runner_id {
                        Some(runner_id) => RawObject::parse(text)
                            .map(|obj| obj.with_string("callId", runner_id))
                            .unwrap_or_else(|_| text.clone()),
                        None => text.clone(),
                    };
                    conn.send(&text)
                        .map_err(|e| Failure::at(line, format!("cannot send: {e}")))?;
                }
                Action::SendRaw(text) => conn
                    .send(text)
                    .map_err(|e| Failure::at(line, format!("cannot send: {e}")))?,
                Action::Recv(expected) => {
                    let bound = within.take();
                    let timeout = bound.unwrap_or(self.recv_timeout);
                    match conn.recv(timeout) {
                        Received::Message(text) => {
                            let actual = json::parse(&text).map_err(|e| {
                                Failure::at(
                                    line,
                                    format!("the runner sent a line that is not JSON: {e}"),
                                )
                                .expecting(expected)
                                .got(&text)
                            })?;
                            check(&expected.pattern, &actual, &mut ids).map_err(|why| {
                                Failure::at(line, why).expecting(expected).got(&text)
                            })?;
                        }
                        Received::Timeout => {
                            let why = match bound {
                                Some(_) => format!(
                                    "no message within {} ms (expect_within_ms)",
                                    timeout.as_millis()
                                ),
                                None => format!("no message within {} ms", timeout.as_millis()),
                            };
                            return Err(Failure::at(line, why).expecting(expected));
                        }
                        Received::Closed(why) => {
                            return Err(Failure::at(line, format!("expected a message, but {why}"))
                                .expecting(expected))
                        }
                    }
                }
                Action::Sleep(duration) => thread::sleep(*duration),
                Action::Close => {
                    conn.close()
                        .map_err(|e| Failure::at(line, format!("cannot close: {e}")))?;
                    closed = true;
                }
                Action::ExpectExitWithin(timeout) => {
                    if conn.wait_exit(*timeout) == Exit::StillRunning {
                        return Err(Failure::at(
                            line,
                            format!("the runner did not exit within {} ms", timeout.as_millis()),
                        ));
                    }
                }
                Action::ExpectSilence(duration) => match conn.recv(*duration) {
                    Received::Timeout => {}
                    Received::Closed(_) if closed => {}
                    Received::Message(text) => {
                        return Err(Failure::at(
                            line,
                            format!(
                                "expected no message for {} ms, but the runner sent one",
                                duration.as_millis()
                            ),
                        )
                        .got(&text))
                    }
                    Received::Closed(why) => {
                        return Err(Failure::at(
                            line,
                            format!("expected the session to stay open and silent, but {why}"),
                        ))
                    }
                },
                Action::ExpectWithin(duration) => within = Some(*duration),
            }
        }
        if !closed {
            if let Received::Message(text) = conn.recv(Duration::from_millis(1)) {
                return Err(Failure::at(
                    last_line,
                    "the runner sent a message after the transcript's last line",
                )
                .got(&text));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::io;
    use std::sync::{Arc, Mutex};

    /// A scripted runner: answers each send with the replies queued for it.
    struct Script {
        replies: Mutex<VecDeque<Vec<&'static str>>>,
        sent: Arc<Mutex<Vec<String>>>,
    }

    struct ScriptConnection {
        replies: VecDeque<Vec<&'static str>>,
        pending: VecDeque<String>,
        sent: Arc<Mutex<Vec<String>>>,
    }

    impl Transport for Script {
        fn connect(&self) -> io::Result<Box<dyn Connection>> {
            Ok(Box::new(ScriptConnection {
                replies: std::mem::take(&mut *self.replies.lock().unwrap()),
                pending: VecDeque::new(),
                sent: Arc::clone(&self.sent),
            }))
        }
    }

    impl Connection for ScriptConnection {
        fn send(&mut self, text: &str) -> io::Result<()> {
            self.sent.lock().unwrap().push(text.to_string());
            let replies = self.replies.pop_front().unwrap_or_default();
            self.pending.extend(replies.into_iter().map(String::from));
            Ok(())
        }
        fn recv(&mut self, _timeout: Duration) -> Received {
            self.pending
                .pop_front()
                .map_or(Received::Timeout, Received::Message)
        }
        fn close(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn wait_exit(&mut self, _timeout: Duration) -> Exit {
            Exit::NotApplicable
        }
        fn stderr_tail(&self) -> Option<String> {
            Some("warning: something".into())
        }
    }

    fn script(replies: Vec<Vec<&'static str>>) -> (Script, Arc<Mutex<Vec<String>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let script = Script {
            replies: Mutex::new(replies.into()),
            sent: Arc::clone(&sent),
        };
        (script, sent)
    }

    const TOOL_TRANSCRIPT: &str = r#"{"comment": "tool round trip"}
{"type":"execute","id":"e","code":"await t.f()","providers":[]}
{"type":"started","id":"e"}
{"type":"tool_call","callId":"call-1","providerName":"t","safeToolName":"f"}
{"type":"tool_result","callId":"call-1","ok":true,"result":[1]}
{"type":"done","id":"e","ok":true,"durationMs":1,"logs":[],"result":"$re:^x"}
"#;

    #[test]
    fn call_ids_are_rewritten_in_later_sends() {
        let (runner, sent) = script(vec![
            vec![
                r#"{"type":"started","id":"e"}"#,
                r#"{"type":"tool_call","callId":"r9","providerName":"t","safeToolName":"f"}"#,
            ],
            vec![r#"{"type":"done","id":"e","ok":true,"durationMs":17,"logs":[],"result":"xy"}"#],
        ]);
        let t = Transcript::parse("tools/x", TOOL_TRANSCRIPT).unwrap();
        replay(&t, &runner).unwrap();
        let sent = sent.lock().unwrap();
        assert_eq!(
            sent[1],
            r#"{"type":"tool_result","callId":"r9","ok":true,"result":[1]}"#
        );
    }

    #[test]
    fn failures_name_the_line_and_show_both_messages_and_stderr() {
        let (runner, _) = script(vec![vec![
            r#"{"type":"started","id":"e"}"#,
            r#"{"type":"done","id":"e","ok":false,"durationMs":1,"logs":[],"error":{"code":"runtime_error","message":"t is not defined"}}"#,
        ]]);
        let t = Transcript::parse("tools/x", TOOL_TRANSCRIPT).unwrap();
        let failure = replay(&t, &runner).unwrap_err();
        assert_eq!(failure.line, Some(4));
        assert_eq!(
            failure.reason,
            "at type: expected \"tool_call\", got \"done\""
        );
        assert!(failure
            .actual
            .as_deref()
            .unwrap()
            .contains("t is not defined"));
        let text = failure.to_string();
        assert!(text.contains("expected: {\"type\":\"tool_call\""), "{text}");
        assert!(text.contains("    | warning: something"), "{text}");
    }

    #[test]
    fn silence_timeouts_and_extra_messages_fail() {
        let t = Transcript::parse(
            "x",
            "{\"type\":\"cancel\",\"id\":\"a\"}\n{\"expect_silence_ms\": 1}",
        )
        .unwrap();
        let (runner, _) = script(vec![vec![r#"{"type":"done"}"#]]);
        let failure = replay(&t, &runner).unwrap_err();
        assert!(failure.reason.contains("expected no message"), "{failure}");

        let t = Transcript::parse("x", "{\"type\":\"cancel\",\"id\":\"a\"}").unwrap();
        let (runner, _) = script(vec![vec![r#"{"type":"done"}"#]]);
        let failure = replay(&t, &runner).unwrap_err();
        assert!(
            failure.reason.contains("after the transcript's last line"),
            "{failure}"
        );

        let t = Transcript::parse(
            "x",
            "{\"type\":\"cancel\",\"id\":\"a\"}\n{\"expect_within_ms\": 5}\n{\"type\":\"started\",\"id\":\"a\"}",
        )
        .unwrap();
        let (runner, _) = script(vec![]);
        let failure = replay(&t, &runner).unwrap_err();
        assert_eq!(failure.line, Some(3));
        assert!(failure.reason.contains("within 5 ms"), "{failure}");
    }

    #[test]
    fn garbage_and_overly_deep_runner_lines_fail_cleanly() {
        let t = Transcript::parse(
            "x",
            "{\"type\":\"cancel\",\"id\":\"a\"}\n{\"type\":\"started\",\"id\":\"a\"}",
        )
        .unwrap();
        let (runner, _) = script(vec![vec!["not json"]]);
        assert!(replay(&t, &runner).unwrap_err().reason.contains("not JSON"));
        let deep: &'static str = Box::leak(
            format!(
                "{{\"type\":\"started\",\"id\":{}{}}}",
                "[".repeat(200_000),
                "]".repeat(200_000)
            )
            .into_boxed_str(),
        );
        let (runner, _) = script(vec![vec![deep]]);
        let failure = replay(&t, &runner).unwrap_err();
        assert!(failure.reason.contains("200001 levels"), "{failure}");
    }
}

//! Fuzz target: arbitrary UTF-8 guest source, run once per input in an in-process session.
//!
//! One `execute` (timeoutMs 50, memoryLimitBytes 8 MiB, provider `t` with tool `echo`); every
//! `tool_call` is answered at once with its own input. The execution must end with exactly one
//! `done` within the watchdog, after one `started`, and call no tool but `t.echo`.
#![no_main]

use execbox_fuzz::{check_wire, limits, Expected, Session};
use execbox_protocol::{Execute, Message, ProviderManifest, RuntimeOptions, ToolManifest};
use execbox_runner::Inbound;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(code) = std::str::from_utf8(data) else {
        return;
    };
    let session = Session::start(limits(), true);
    let item = Inbound::Message(Message::Execute(Execute {
        id: "g".into(),
        code: code.into(),
        options: RuntimeOptions {
            timeout_ms: 50,
            memory_limit_bytes: 8 << 20,
            ..RuntimeOptions::default()
        },
        providers: vec![ProviderManifest {
            name: "t".into(),
            tools: vec![ToolManifest::named("echo")],
            types: None,
            unavailable: None,
        }],
        replay: None,
    }));
    let mut expected = Expected::default();
    expected.note(&item);
    assert!(session.feed(item), "the only execute was refused");
    expected.wait_for_dones(&session.recorder);
    let sent = session.close();
    check_wire(&sent, |provider, tool| provider == "t" && tool == "echo");
    expected.check(&sent);
    let started = sent
        .iter()
        .filter(|m| matches!(m, Message::Started(_)))
        .count();
    assert_eq!(started, 1, "one started");
});

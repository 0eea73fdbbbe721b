//! Issue 23, durable executions: an `execute` with `replay` gives the guest a seeded
//! `Math.random()` and takes its clock readings from the replayed list before the real clock,
//! and its `done` carries every reading (`clock`), so a re-run in a fresh runner takes the
//! same path. Without `replay` nothing of it exists.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::{execute, Runner};

/// An `execute` of `code` carrying `replay`.
fn replaying(id: &str, code: &str, options: Value, replay: Value) -> Value {
    let mut message = execute(id, code, options);
    message["replay"] = replay;
    message
}

/// Runs one message that must finish without tool calls; returns its `done`.
fn run(runner: &mut Runner, message: Value) -> Value {
    let id = message["id"].clone();
    runner.send(message);
    assert_eq!(runner.recv(), json!({"type": "started", "id": id}));
    let done = runner.recv();
    assert_eq!(done["type"], "done", "{done}");
    done
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
}

const RANDOMS: &str = "Array.from({ length: 8 }, () => Math.random())";

#[test]
fn same_seed_gives_the_same_random_sequence_in_two_processes() {
    let sequence = |seed: u64| {
        let mut runner = Runner::spawn(&[]);
        let done = run(
            &mut runner,
            replaying("r", RANDOMS, json!({}), json!({"randomSeed": seed})),
        );
        assert_eq!(done["ok"], true, "{done}");
        done["result"].clone()
    };
    let first = sequence(42);
    assert_eq!(first, sequence(42));
    assert_ne!(first, sequence(43));
    // The algorithm is part of the protocol (xoshiro256** seeded by splitmix64), so any
    // runner implementing replay gives these.
    assert_eq!(
        first.as_array().unwrap()[..3],
        [
            json!(0.08386297105988216),
            json!(0.3789802506626686),
            json!(0.6800434110281394)
        ]
    );
    assert!(first
        .as_array()
        .unwrap()
        .iter()
        .all(|x| (0.0..1.0).contains(&x.as_f64().unwrap())));
    // Without replay the sequence is the engine's own, and the done has no clock.
    let mut runner = Runner::spawn(&[]);
    let done = run(&mut runner, execute("o", RANDOMS, json!({})));
    assert_ne!(done["result"], first);
    assert!(done.get("clock").is_none(), "{done}");
    assert!(done.get("clockOverflow").is_none(), "{done}");
}

#[test]
fn replayed_clock_readings_come_first_then_the_real_clock() {
    let mut runner = Runner::spawn(&[]);
    let code = "const a = Date.now(), b = new Date().getTime(), s = Date(), c = Date.now();\n\
                [a, b, typeof s, s === new Date(2000).toString(), c]";
    let before = now_ms();
    let done = run(
        &mut runner,
        replaying(
            "c",
            code,
            json!({}),
            json!({"randomSeed": 1, "clock": [[1000, 2], [2000, 1]]}),
        ),
    );
    let after = now_ms();
    assert_eq!(done["ok"], true, "{done}");
    let result = done["result"].as_array().unwrap();
    assert_eq!(
        result[..4],
        [json!(1000), json!(1000), json!("string"), json!(true)]
    );
    let real = result[4].as_f64().unwrap();
    assert!(
        before <= real && real <= after,
        "{real} not in {before}..{after}"
    );
    assert_eq!(
        done["clock"],
        json!([[1000, 2], [2000, 1], [real as u64, 1]])
    );
    assert!(done.get("clockOverflow").is_none(), "{done}");
}

#[test]
fn date_keeps_its_behaviour_beside_the_replayed_clock() {
    let code = r#"
        class Later extends Date {}
        const later = new Later();
        [
          new Date(0).toISOString(), new Date("2020-01-01").getTime(), Date.UTC(2020, 0, 1),
          Date.parse("2020-01-01"), new Date(2020, 1).getMonth(), String(new Date(NaN)),
          new Date() instanceof Date, later instanceof Later, later instanceof Date,
          later.getTime(), Date.prototype.constructor === Date,
          Object.getPrototypeOf(new Date()) === Date.prototype, Date.name, Date.length,
          String(Date), String(Date.now), String(Math.random),
          Object.getOwnPropertyNames(Date).join(), Date.now.length, Math.random.length,
          Object.values(Object.getOwnPropertyDescriptor(Date, "prototype")).slice(1).join(),
          Object.values(Object.getOwnPropertyDescriptor(globalThis, "Date")).slice(1).join(),
          Object.keys(globalThis).length, Object.getOwnPropertyNames(globalThis).join(),
        ]"#;
    let mut runner = Runner::spawn(&[]);
    let ordinary = run(&mut runner, execute("o", code, json!({})));
    let replayed = run(
        &mut runner,
        replaying(
            "r",
            code,
            json!({}),
            json!({"randomSeed": 5, "clock": [[5000, 2]]}),
        ),
    );
    assert_eq!(ordinary["ok"], true, "{ordinary}");
    assert_eq!(replayed["ok"], true, "{replayed}");
    let (ordinary, replayed) = (
        ordinary["result"].as_array().unwrap(),
        replayed["result"].as_array().unwrap(),
    );
    assert_eq!(ordinary.len(), replayed.len());
    for (i, (o, r)) in ordinary.iter().zip(replayed).enumerate() {
        // The subclass instance's time is the one reading that differs.
        if i == 9 {
            assert_eq!(*r, json!(5000));
            continue;
        }
        assert_eq!(o, r, "item {i} differs with replay");
    }
    assert_eq!(replayed[0], "1970-01-01T00:00:00.000Z");
    assert_eq!(replayed[14], "function Date() {\n    [native code]\n}");
}

#[test]
fn busy_loop_replays_to_the_same_iteration_count() {
    let code = "const t0 = Date.now(); let n = 0; while (Date.now() - t0 < 60) n++; n";
    let mut runner = Runner::spawn(&[]);
    let first = run(
        &mut runner,
        replaying("a", code, json!({}), json!({"randomSeed": 1})),
    );
    assert_eq!(first["ok"], true, "{first}");
    let clock = first["clock"].as_array().unwrap().clone();
    // Run-length encoding keeps a busy loop to about one run per millisecond it ran.
    assert!(clock.len() <= 200, "{} runs", clock.len());
    let readings: u64 = clock.iter().map(|run| run[1].as_u64().unwrap()).sum();
    assert_eq!(readings, first["result"].as_u64().unwrap() + 2);
    // A fresh process, replaying that clock: the same iterations, the same readings.
    let mut again = Runner::spawn(&[]);
    let second = run(
        &mut again,
        replaying(
            "a",
            code,
            json!({}),
            json!({"randomSeed": 1, "clock": clock}),
        ),
    );
    assert_eq!(second["result"], first["result"]);
    assert_eq!(second["clock"], first["clock"]);
}

#[test]
fn malformed_replay_is_a_validation_error_naming_the_field() {
    let cases = [
        (
            json!({"randomSeed": 1, "clock": [[1, 1], [2, 1], [3, 1], [4, 0]]}),
            "replay.clock[3][1] must be a whole number from 1",
        ),
        (
            json!({"randomSeed": 9_007_199_254_740_992_u64}),
            "replay.randomSeed must be a whole number from 0 to 9007199254740991",
        ),
        (json!({"clock": []}), "replay.randomSeed is required"),
        (
            json!({"randomSeed": 1, "clock": [[1, 1], ["soon", 1]]}),
            "replay.clock[1][0] must be a number",
        ),
        (json!([1]), "replay must be an object"),
    ];
    let mut runner = Runner::spawn(&[]);
    for (replay, want) in cases {
        runner.send(replaying("bad", "1", json!({}), replay.clone()));
        let done = runner.recv();
        assert_eq!(done["type"], "done", "{replay}: {done}");
        assert_eq!(done["error"]["code"], "validation_error", "{done}");
        let message = done["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{replay}: {message}");
    }
    // The session goes on.
    let done = run(&mut runner, execute("ok", "1", json!({})));
    assert_eq!(done["result"], 1);
}

#[test]
fn guest_cannot_tamper_with_the_replayed_clock() {
    let code = r#"
        const seen = [];
        Date.now = () => 1;
        Date.prototype.constructor = function () {};
        Date.prototype.toString = () => "forged";
        Reflect.construct = () => ({ getTime: () => 2 });
        Reflect.apply = () => "forged";
        Object.defineProperty = () => { throw new Error("no"); };
        Array.prototype[0] = 3;
        seen.push(new Date().getTime(), Date(), new Date(7).getTime());
        const Saved = Date;
        globalThis.Date = function () { return { getTime: () => 4 }; };
        seen.push(new Saved().getTime());
        Math.random = () => 0.5;
        seen"#;
    let clock = json!([[1000, 1], [2000, 1], [3000, 1]]);
    let mut runner = Runner::spawn(&[]);
    let done = run(
        &mut runner,
        replaying(
            "t",
            code,
            json!({}),
            json!({"randomSeed": 1, "clock": clock}),
        ),
    );
    assert_eq!(done["ok"], true, "{done}");
    let result = done["result"].as_array().unwrap();
    assert_eq!(result[0], 1000);
    assert!(
        result[1].as_str().unwrap().contains("1970"),
        "Date() is the string of the replayed 2000 ms: {}",
        result[1]
    );
    assert_eq!(result[2], 7);
    assert_eq!(result[3], 3000);
    assert_eq!(done["clock"], clock);

    // Nothing of the hooks is reachable: the native functions carry only a name and a length,
    // and the global object has the same names with replay as without.
    let probe = r#"[
        Object.getOwnPropertyNames(Date.now).join(), Object.getOwnPropertyNames(Math.random).join(),
        Object.getOwnPropertyNames(globalThis).sort().join(),
        Object.getOwnPropertyNames(Date).join(),
        Object.getOwnPropertyNames(Date.prototype).length,
    ]"#;
    let ordinary = run(&mut runner, execute("p", probe, json!({})));
    let replayed = run(
        &mut runner,
        replaying("p", probe, json!({}), json!({"randomSeed": 1})),
    );
    assert_eq!(replayed["result"], ordinary["result"]);
    assert_eq!(replayed["result"][0], "length,name");
}

#[test]
fn done_carries_the_clock_on_error_timeout_and_cancel() {
    let replay = json!({"randomSeed": 1, "clock": [[1000, 3]]});
    let mut runner = Runner::spawn(&[]);

    let error = run(
        &mut runner,
        replaying(
            "e",
            "Date.now(); throw new Error('boom')",
            json!({}),
            replay.clone(),
        ),
    );
    assert_eq!(error["error"]["code"], "runtime_error", "{error}");
    assert_eq!(error["clock"], json!([[1000, 1]]));

    let timeout = run(
        &mut runner,
        replaying(
            "t",
            "Date.now(); Date.now(); while (true) {}",
            json!({"timeoutMs": 100}),
            replay.clone(),
        ),
    );
    assert_eq!(timeout["error"]["code"], "timeout", "{timeout}");
    assert_eq!(timeout["clock"], json!([[1000, 2]]));

    let reading = run(
        &mut runner,
        replaying(
            "r",
            "while (true) Date.now()",
            json!({"timeoutMs": 100}),
            replay.clone(),
        ),
    );
    assert_eq!(reading["error"]["code"], "timeout", "{reading}");
    let clock = reading["clock"].as_array().unwrap();
    assert_eq!(clock[0], json!([1000, 3]));
    assert!(clock.len() > 1, "then the real clock: {reading}");

    runner.send(replaying(
        "c",
        "Date.now(); await tools.hang({})",
        json!({"timeoutMs": 60000}),
        replay,
    ));
    assert_eq!(runner.recv()["type"], "started");
    assert_eq!(runner.recv()["type"], "tool_call");
    runner.send(json!({"type": "cancel", "id": "c"}));
    let cancelled = runner.recv();
    assert_eq!(cancelled["error"]["code"], "timeout", "{cancelled}");
    assert_eq!(cancelled["clock"], json!([[1000, 1]]));
}

#[test]
fn clock_past_its_run_limit_stops_recording_and_says_so() {
    let max = execbox_protocol::MAX_CLOCK_RUNS;
    let runs: Vec<Value> = (0..max).map(|i| json!([i, 1])).collect();
    let mut runner = Runner::spawn(&[]);
    let done = run(
        &mut runner,
        replaying(
            "o",
            &format!("let last; for (let i = 0; i < {max} + 3; i++) last = Date.now(); last"),
            json!({"timeoutMs": 60000}),
            json!({"randomSeed": 1, "clock": runs}),
        ),
    );
    assert_eq!(done["ok"], true, "{}", done["error"]);
    assert_eq!(done["clockOverflow"], true);
    let clock = done["clock"].as_array().unwrap();
    assert_eq!(clock.len(), max);
    assert_eq!(clock[max - 1], json!([max - 1, 1]));
}

#[test]
fn clock_runs_over_the_message_limit_are_cut_and_marked() {
    let mut runner = Runner::spawn(&["--max-message-bytes", "2000"]);
    let code = "const seen = new Set(); while (seen.size < 300) seen.add(Date.now()); seen.size";
    let done = run(
        &mut runner,
        replaying(
            "m",
            code,
            json!({"timeoutMs": 60000}),
            json!({"randomSeed": 1}),
        ),
    );
    assert_eq!(done["result"], 300, "{done}");
    assert_eq!(done["clockOverflow"], true);
    let runs = done["clock"].as_array().unwrap().len();
    assert!(runs > 10 && runs < 300, "{runs} runs kept");
    assert!(serde_json::to_string(&done).unwrap().len() <= 2000);
}

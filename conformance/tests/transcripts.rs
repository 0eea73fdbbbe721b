//! Checks the shipped transcripts themselves: they parse, each says why it exists, and the spec's own are there.

use std::collections::BTreeMap;

use execbox_conformance::{load_dir, Action, TRANSCRIPTS_DIR};

#[test]
fn every_shipped_transcript_parses_and_has_a_comment() {
    let transcripts = load_dir(TRANSCRIPTS_DIR).expect("transcripts load");
    assert!(
        transcripts.len() >= 85,
        "only {} transcripts",
        transcripts.len()
    );
    let mut per_area: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &transcripts {
        let comment = t.comment.as_deref().unwrap_or_default();
        assert!(
            comment.len() > 20,
            "{}: needs a first-line comment saying why",
            t.name
        );
        let (area, _) = t.name.split_once('/').expect("transcripts live in <area>/");
        *per_area.entry(area).or_default() += 1;
        assert!(
            t.steps.iter().any(|s| matches!(
                s.action,
                Action::Send { .. } | Action::SendRaw(_) | Action::Close
            )),
            "{}: sends nothing",
            t.name
        );
    }
    for area in [
        "spec",
        "execute",
        "validation",
        "tools",
        "errors",
        "serialization",
        "console",
        "limits",
        "cancel",
        "session",
    ] {
        assert!(per_area.contains_key(area), "no transcripts in {area}/");
    }
}

#[test]
fn the_spec_transcripts_are_verbatim() {
    let dir = format!("{TRANSCRIPTS_DIR}/spec");
    let success = std::fs::read_to_string(format!("{dir}/minimal_success.ndjson")).unwrap();
    assert!(success.contains(
        r#"{"type":"done","id":"exec-1","ok":true,"durationMs":3,"logs":[],"result":true}"#
    ));
    let cancel = std::fs::read_to_string(format!("{dir}/minimal_cancel.ndjson")).unwrap();
    assert!(cancel.contains(r#"{"type":"cancel","id":"exec-2"}"#));
    assert_eq!(success.lines().count(), 6);
    assert_eq!(cancel.lines().count(), 6);
}

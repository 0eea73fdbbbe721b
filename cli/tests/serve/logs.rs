//! `execbox serve` carries a script capability's logs in its outcome, its record and its
//! end event on the SSE stream.

use std::time::Duration;

use serde_json::json;

use super::{client, json_of, script_yaml, serve};
use crate::support::capabilities::Roots;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_s_logs_are_in_its_outcome_record_and_sse_end_event() {
    let roots = Roots::new("serve-logs");
    roots.project.capability(
        "chatty",
        &script_yaml("chatty", ""),
        &[("index.js", "console.log('one'); console.log('two'); 3")],
    );
    let server = serve(&roots, &[]);
    let client = client();
    let mut events = client.get(server.at("/v1/events")).send().await.unwrap();
    let (_, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "chatty"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = body["executionId"].as_str().unwrap().to_string();
    let (_, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome["result"], 3, "{outcome}");
    assert_eq!(outcome["logs"], json!(["one", "two"]), "{outcome}");
    let (_, record) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(record["logs"], json!(["one", "two"]), "{record}");
    let mut seen = String::new();
    while !seen.contains("event: completed") || !seen.ends_with("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.chunk())
            .await
            .expect("an event")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let completed = seen
        .split("\n\n")
        .find(|e| e.contains("event: completed"))
        .unwrap();
    assert!(completed.contains(r#""logs":["one","two"]"#), "{completed}");
}

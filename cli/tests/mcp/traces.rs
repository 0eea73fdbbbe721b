//! Traces of `execbox mcp`: the client's W3C `traceparent` (in `_meta` over stdio, as a header
//! over HTTP) is the parent of its spans, and an upstream MCP call carries ours on in `_meta`.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::ServiceExt as _;
use serde_json::json;

use super::otlp::{named, OtlpReceiver, ReceivedSpan};
use super::{answer, args, Events, Harness, Mcp, WAIT};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// The one span named `name`.
fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> Result<&'a ReceivedSpan, String> {
    match named(spans, name)[..] {
        [span] => Ok(span),
        _ => Err(format!("one {name} span expected: {spans:#?}")),
    }
}

/// The spans of one `execute_code` calling `alpha.add`, sent under our trace: the request's
/// span a child of the client's, the execution, the tool call and the upstream call in a line,
/// and the upstream told the upstream call's span as its parent.
fn check_spans(h: &Harness, spans: &[ReceivedSpan]) -> Result<(), String> {
    let request = one(spans, "execbox.mcp.execute_code")?;
    check!(request.trace_id == TRACE, "{request:#?}");
    check!(request.parent_span_id == PARENT, "{request:#?}");
    check!(request.kind == 2, "a server span: {request:#?}");
    let execution = one(spans, "execbox.execution")?;
    check!(
        execution.parent_span_id == request.span_id,
        "{execution:#?}"
    );
    check!(
        request.attribute("execbox.execution_id") == execution.attribute("execbox.execution_id"),
        "{request:#?}"
    );
    let call = one(spans, "execbox.tool_call")?;
    check!(call.parent_span_id == execution.span_id, "{call:#?}");
    check!(call.attribute("execbox.tool") == "alpha.add", "{call:#?}");
    let upstream = one(spans, "execbox.mcp.upstream_call")?;
    check!(upstream.trace_id == TRACE, "{upstream:#?}");
    check!(upstream.parent_span_id == call.span_id, "{upstream:#?}");
    check!(upstream.kind == 3, "a client span: {upstream:#?}");
    check!(
        upstream.attribute("execbox.execution_id") == execution.attribute("execbox.execution_id"),
        "{upstream:#?}"
    );
    check!(
        upstream.attribute("execbox.outcome") == "ok",
        "{upstream:#?}"
    );
    let marks = h.marks();
    let sent = format!("traceparent 00-{TRACE}-{}-01", upstream.span_id);
    check!(
        marks.contains(&sent),
        "{sent} not in the upstream's marks:\n{marks}"
    );
    Ok(())
}

pub async fn execute_code_meta_traceparent_is_the_parent_and_goes_upstream(
    h: Harness,
) -> Result<(), String> {
    let receiver = OtlpReceiver::start();
    let config = h.config(json!({"alpha": h.upstream("alpha")}));
    let mut command = h.command(&["--config", config.to_str().unwrap()]);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let events = Events::default();
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = tokio::time::timeout(WAIT, events.clone().serve((stdout, stdin)))
        .await
        .map_err(|_| "execbox mcp did not initialize in time".to_string())?
        .map_err(|e| format!("cannot initialize: {e}"))?;
    let mcp = Mcp {
        client,
        child,
        events,
    };
    let mut params = CallToolRequestParams::new("execute_code").with_arguments(args(
        json!({"code": "(await alpha.add({ a: 2, b: 3 })).sum"}),
    ));
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(format!("00-{TRACE}-{PARENT}-01"));
    params.meta = Some(meta);
    let result = tokio::time::timeout(WAIT, mcp.client.call_tool(params))
        .await
        .map_err(|_| "execute_code did not answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    let answer = answer(result);
    check!(answer.result() == &json!(5), "{}", answer.text);
    let status = mcp.stop().await?;
    check!(status.success(), "{status:?}");
    // It has exited: everything must have been sent.
    check_spans(&h, &receiver.spans())
}

pub async fn http_traceparent_header_is_the_parent_of_the_execution(
    h: Harness,
) -> Result<(), String> {
    let receiver = OtlpReceiver::start();
    let config = h.config(json!({"alpha": h.upstream("alpha")}));
    let token_file = h.write("token", "s3cret\n");
    let mut command = h.command(&[
        "--config",
        config.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--token-file",
        token_file.to_str().unwrap(),
    ]);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let mut server = command.spawn().map_err(|e| e.to_string())?;
    let mut url = None;
    let found = h
        .wait_for(|h| {
            let stderr = h.stderr();
            let whole = &stderr[..stderr.rfind('\n').map_or(0, |end| end + 1)];
            url = whole
                .lines()
                .find_map(|l| l.strip_prefix("execbox mcp: serving ").map(str::to_owned));
            url.is_some()
        })
        .await;
    check!(found, "no address in stderr");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "traceparent",
        format!("00-{TRACE}-{PARENT}-01").parse().unwrap(),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .map_err(|e| e.to_string())?;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url.unwrap_or_default())
            .auth_header("s3cret"),
    );
    let client = Events::default()
        .serve(transport)
        .await
        .map_err(|e| format!("initialize over HTTP: {e}"))?;
    let result = client
        .call_tool(
            CallToolRequestParams::new("execute_code").with_arguments(args(
                json!({"code": "(await alpha.add({ a: 2, b: 3 })).sum"}),
            )),
        )
        .await
        .map_err(|e| e.to_string())?;
    let answer = answer(result);
    check!(answer.result() == &json!(5), "{}", answer.text);
    drop(client);
    // SIGTERM: it stops, sending its last spans first.
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &server.id().unwrap_or_default().to_string()])
        .status()
        .map_err(|e| e.to_string())?;
    check!(killed.success(), "kill -TERM failed");
    let status = tokio::time::timeout(WAIT, server.wait())
        .await
        .map_err(|_| "no exit after SIGTERM".to_string())?
        .map_err(|e| e.to_string())?;
    check!(status.code() == Some(143), "{status:?}");
    let spans = receiver.wait_for(Duration::ZERO, |_| true);
    check_spans(&h, &spans)
}

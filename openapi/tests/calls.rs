//! Calls against a real local server: requests as built, answers as read, every error path.

mod support;

use execbox_host::ErrorCode;
use serde_json::json;
use support::{call, provider, start};

#[tokio::test]
async fn path_query_and_header_parameters_are_sent_encoded() {
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| {
        c.headers
            .insert("X-Api-Version".into(), "2022-11-28".into());
    });
    let out = call(
        &p,
        "echo/get",
        json!({"id": "a b/c", "tags": ["x", "y z"], "pipes": ["1", "2"], "X-Trace": "t-1"}),
    )
    .await
    .unwrap();
    assert_eq!(out["method"], "GET");
    let seen = api.last();
    assert_eq!(seen.path, "/v1/echo/a%20b%2Fc");
    assert_eq!(seen.query, "tags=x&tags=y%20z&pipes=1|2");
    assert_eq!(seen.headers["x-trace"], "t-1");
    assert_eq!(seen.headers["x-api-version"], "2022-11-28");
}

#[tokio::test]
async fn json_bodies_are_sent_and_answers_decoded_by_media_type() {
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |_| {});
    call(
        &p,
        "echo/post",
        json!({"id": "1", "body": {"title": "hi", "n": [1, 2]}}),
    )
    .await
    .unwrap();
    let seen = api.last();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&seen.body).unwrap(),
        json!({"title": "hi", "n": [1, 2]})
    );

    assert_eq!(call(&p, "text", json!({})).await.unwrap(), json!("hello\n"));
    assert_eq!(
        call(&p, "binary", json!(null)).await.unwrap(),
        json!({"type": "binary", "mimeType": "image/png", "size": 300})
    );
    assert_eq!(call(&p, "empty", json!({})).await.unwrap(), json!(null));
    let err = call(&p, "bad_json", json!({})).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolError);
    assert!(
        err.message
            .starts_with("GET /bad-json: the answer says application/json but is not valid JSON"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_non_2xx_status_is_a_tool_error_naming_method_path_status_and_body() {
    let (_, addr, _, _) = start().await;
    let p = provider(addr, |_| {});
    let err = call(&p, "status", json!({"code": 404})).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolError);
    assert_eq!(err.reason.as_deref(), Some("http_status"));
    assert_eq!(err.status, Some(404));
    assert_eq!(err.retry_after_ms, None);
    assert!(
        err.message
            .starts_with("GET /status/{code}: HTTP 404 Not Found: denied: uri=/v1/status/404"),
        "{}",
        err.message
    );
    // A 500 with Retry-After does not set retryAfterMs: only 429 and 503 do.
    let err = call(&p, "status", json!({"code": 500, "retry": "3"}))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after_ms, None);
}

#[tokio::test]
async fn retry_after_on_429_and_503_sets_retry_after_ms() {
    let (_, addr, _, _) = start().await;
    let p = provider(addr, |_| {});
    let err = call(&p, "status", json!({"code": 429, "retry": "7"}))
        .await
        .unwrap_err();
    assert_eq!(err.reason.as_deref(), Some("http_status"));
    assert_eq!(err.retry_after_ms, Some(7000));
    assert_eq!(err.status, Some(429));
    assert!(
        err.message.contains("HTTP 429 Too Many Requests"),
        "{}",
        err.message
    );
    let later = httpdate_in(90);
    let err = call(&p, "status", json!({"code": 503, "retry": later}))
        .await
        .unwrap_err();
    let ms = err.retry_after_ms.expect("a date gives a delay");
    assert!((60_000..=90_000).contains(&ms), "{ms}");
}

fn httpdate_in(seconds: u64) -> String {
    // RFC 7231 IMF-fixdate, computed without a date library.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + seconds;
    let (days, rest) = (now / 86_400, now % 86_400);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {d:02} {} {year} {h:02}:{m:02}:{s:02} GMT",
        months[(month - 1) as usize]
    )
}

#[tokio::test]
async fn same_origin_redirects_are_followed_and_cross_origin_ones_refused() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("redirect-token"), "PLANTED-redirect-token-93f1\n").unwrap();
    let (api, addr, other, other_addr) = start().await;
    let p = provider(addr, |c| {
        c.auth = Some(execbox_openapi::AuthConfig::Bearer(
            execbox_openapi::Secret::File("redirect-token".into()),
        ));
    });
    let out = call(&p, "redirect_same", json!({})).await.unwrap();
    assert_eq!(out["path"], "/v1/echo/landed");
    assert_eq!(
        api.last().headers["authorization"],
        "Bearer PLANTED-redirect-token-93f1"
    );
    // The guest never sees the credential, even when the API echoes it.
    assert_eq!(out["authorization"], "Bearer [redacted]");

    let err = call(&p, "redirect_other", json!({})).await.unwrap_err();
    assert_eq!(err.reason.as_deref(), Some("http_status"));
    assert!(matches!(err.status, Some(301..=308)), "{:?}", err.status);
    assert!(
        err.message.starts_with(
            "GET /redirect-other: HTTP 302 Found: the server redirected to another origin"
        ),
        "{}",
        err.message
    );
    assert!(
        err.message.contains(&format!("http://{other_addr}")),
        "{}",
        err.message
    );
    assert!(
        other.seen().is_empty(),
        "the other origin was reached: {:?}",
        other.seen()
    );

    let err = call(&p, "redirect_loop", json!({})).await.unwrap_err();
    assert!(
        err.message.contains("redirected more than 10 times"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_slow_server_is_cut_at_the_time_limit() {
    let (_, addr, _, _) = start().await;
    let p = provider(addr, |c| c.timeout_ms = 300);
    let started = std::time::Instant::now();
    let err = call(&p, "slow", json!({})).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
    assert_eq!(
        err.message,
        "GET /slow: no complete answer within 300 ms (the provider's timeout_ms)"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn an_oversized_answer_fails_by_its_length_or_while_streaming() {
    let (_, addr, _, _) = start().await;
    let p = provider(addr, |c| c.max_response_bytes = 1000);
    let err = call(&p, "big", json!({})).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolError);
    assert!(err.message.starts_with("GET /big: the answer is 4002 bytes, more than the provider's max_response_bytes (1000 bytes)"), "{}", err.message);
    let err = call(&p, "big_stream", json!({})).await.unwrap_err();
    assert!(
        err.message
            .starts_with("GET /big-stream: the answer is over 1000 bytes"),
        "{}",
        err.message
    );
    // Within the bound, the same answers are read.
    let p = provider(addr, |c| c.max_response_bytes = 100_000);
    assert_eq!(
        call(&p, "big_stream", json!({}))
            .await
            .unwrap()
            .as_str()
            .unwrap()
            .len(),
        65_536
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_by_its_origin() {
    let port = support::closed_port().await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let p = provider(addr, |_| {});
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolError);
    assert!(
        err.message.starts_with(&format!(
            "GET /text: cannot connect to http://127.0.0.1:{port}: "
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_cancelled_call_stops_at_once() {
    let (_, addr, _, _) = start().await;
    let p = provider(addr, |_| {});
    let tool = p
        .provider()
        .tools()
        .iter()
        .find(|t| t.name() == "slow")
        .unwrap();
    let ctx = execbox_host::ToolContext::new("t");
    let cancel = ctx.cancel.clone();
    let pending = tool.handler().call(json!({}), ctx);
    cancel.cancel();
    let err = tokio::time::timeout(support::WAIT, pending)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
}

//! What a model reads about the tools: `search_tools`' answers (one tool by its name, words
//! ranked by tool name, nothing found), result types and observed result shapes, approval and
//! rate-limit remarks, unavailable namespaces, and `execbox types --prompt`.

use super::*;

/// `search_tools {query}`'s answer.
async fn search(mcp: &Mcp, query: &str) -> Result<Answer, String> {
    Ok(answer(
        mcp.call("search_tools", json!({ "query": query })).await?,
    ))
}

fn declared(found: &Answer) -> Vec<String> {
    found.structured["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["tool"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub async fn search_tools_answers_one_tool_by_name_and_nothing_by_a_server_name(
    h: Harness,
) -> Result<(), String> {
    let config = h.config(json!({"everything": h.upstream("calc"), "alpha": h.upstream("alpha")}));
    let mcp = h.start(&["--config", config.to_str().unwrap()]).await?;
    for query in [
        "everything.get_sum",
        "everything.get-sum",
        "everything[\"get-sum\"]",
    ] {
        let found = search(&mcp, query).await?;
        check!(
            declared(&found) == ["everything.get_sum"],
            "{query}: {}",
            found.text
        );
        check!(
            found
                .text
                .starts_with(&format!("1 tool matches {query:?}:\n")),
            "{}",
            found.text
        );
        check!(found.text.len() < 1000, "{}", found.text);
    }
    let by_name = search(&mcp, "get-sum").await?;
    check!(
        declared(&by_name)[0] == "everything.get_sum",
        "{}",
        by_name.text
    );
    let found = search(&mcp, "everything.get_sum").await?;
    for part in [
        "declare namespace everything {",
        "   * Adds two numbers and returns their sum\n   * @remarks upstream name: \"get-sum\"; also callable as everything[\"get-sum\"]\n   */",
        "function get_sum(input: {",
        "}): Promise<unknown /* no output schema: JSON text → its value; other text → string; several blocks → array */>;",
    ] {
        check!(found.text.contains(part), "missing {part:?} in:\n{}", found.text);
    }
    // An output schema types the result.
    let add = search(&mcp, "alpha.add").await?;
    check!(
        add.text.contains("}): Promise<{\n    sum: number;\n  }>;"),
        "{}",
        add.text
    );
    // "thing" is part of the server's name only: nothing matches, and the answer says so.
    let none = search(&mcp, "nonexistent thing").await?;
    check!(declared(&none).is_empty(), "{}", none.text);
    check!(
        none.text.starts_with("No tool matches \"nonexistent thing\" (searched tool names and descriptions). The namespaces:\n  everything (MCP server \"everything\"): get_sum, get_greeting, echo_back, sleep_a_while\n  alpha (MCP server \"alpha\"): add, echo,"),
        "{}",
        none.text
    );
    // A namespace alone lists its tools by name, without declarations.
    let listed = search(&mcp, "everything").await?;
    check!(
        listed.text.starts_with(
            "\"everything\" is the namespace everything (MCP server \"everything\", 4 tools):\n"
        ),
        "{}",
        listed.text
    );
    check!(
        listed
            .text
            .contains("  get_sum: Adds two numbers and returns their sum\n"),
        "{}",
        listed.text
    );
    check!(!listed.text.contains("declare"), "{}", listed.text);
    // Words: tool names first, then descriptions.
    let echo = search(&mcp, "echo").await?;
    check!(
        declared(&echo) == ["alpha.echo", "everything.echo_back"],
        "{}",
        echo.text
    );
    let back = search(&mcp, "message back").await?;
    check!(
        declared(&back)[0] == "everything.echo_back",
        "{}",
        back.text
    );
    // A small limit declares that many and names the rest.
    let limited = answer(
        mcp.call("search_tools", json!({"query": "*", "limit": 2}))
            .await?,
    );
    check!(declared(&limited).len() == 2, "{}", limited.text);
    check!(
        limited
            .text
            .starts_with("10 tools match \"*\", best first; the declarations of the first 2:"),
        "{}",
        limited.text
    );
    check!(
        limited
            .text
            .contains("8 more match: everything.echo_back, everything.sleep_a_while, alpha.add,"),
        "{}",
        limited.text
    );
    check!(limited.structured["more"] == 8, "{}", limited.structured);
    // A program may call the tool by its upstream name.
    let sum = mcp
        .value("(await everything.get_sum({ a: 2, b: 3 })).sum")
        .await?;
    check!(sum == json!(5), "{sum}");
    Ok(())
}

pub async fn a_tool_answering_once_shows_its_observed_result_shape(
    h: Harness,
) -> Result<(), String> {
    let config = h.config(json!({"calc": h.upstream("calc")}));
    let state = h.dir.join("state.db");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    let mcp = h.start(&args).await?;
    let before = search(&mcp, "calc.get_sum").await?;
    check!(!before.text.contains("observed"), "{}", before.text);
    mcp.value("await calc.get_sum({ a: 1, b: 2 })").await?;
    mcp.value("await calc.get_greeting()").await?;
    let after = search(&mcp, "calc.get_sum").await?;
    check!(
        after
            .text
            .contains("   */\n  // observed result: { sum: number }\n  function get_sum(input: {"),
        "{}",
        after.text
    );
    let greeting = search(&mcp, "calc.get_greeting").await?;
    check!(
        greeting
            .text
            .contains("  // observed result: string\n  function get_greeting("),
        "{}",
        greeting.text
    );
    check!(mcp.stop().await?.success(), "exit status");
    // The state file keeps them for the next process.
    let again = h.start(&args).await?;
    let kept = search(&again, "calc.get_sum").await?;
    check!(
        kept.text.contains("// observed result: { sum: number }"),
        "{}",
        kept.text
    );
    Ok(())
}

pub async fn declarations_say_which_tools_need_approval_or_are_rate_limited(
    h: Harness,
) -> Result<(), String> {
    let mut calc = h.upstream("calc");
    calc["rateLimit"] = json!({"requests": 10, "window": "1m"});
    calc["requireApproval"] = json!(["get-sum"]);
    let config = h.config(json!({"calc": calc}));
    let mcp = h.start(&["--config", config.to_str().unwrap()]).await?;
    let found = search(&mcp, "calc.get-sum").await?;
    for part in [
        "   * @remarks needs approval: each call waits for a person's yes; a no fails it with \"tool_error\"\n",
        "   * @remarks rate limited: 10 per 1m; a call over it fails with \"tool_error\", error.reason \"rate_limited\" and error.retryAfterMs\n",
    ] {
        check!(found.text.contains(part), "missing {part:?} in:\n{}", found.text);
    }
    let greeting = search(&mcp, "calc.get_greeting").await?;
    check!(
        !greeting.text.contains("needs approval"),
        "{}",
        greeting.text
    );
    check!(
        greeting.text.contains("rate limited: 10 per 1m"),
        "{}",
        greeting.text
    );
    Ok(())
}

pub async fn an_unavailable_upstream_stays_a_namespace_saying_why(
    h: Harness,
) -> Result<(), String> {
    // Nothing listens on port 1.
    let config = h.config(json!({
        "alpha": h.upstream("alpha"),
        "crash": h.upstream("crash"),
        "remote": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
    }));
    let mcp = h
        .start(&[
            "--config",
            config.to_str().unwrap(),
            "--startup-timeout",
            "5",
        ])
        .await?;
    let description = mcp.description().await?;
    let line = description
        .lines()
        .find(|l| l.starts_with("remote ("))
        .unwrap_or_default()
        .to_owned();
    check!(
        line.starts_with("remote (MCP server \"remote\"; UNAVAILABLE: cannot connect to http://127.0.0.1:1/mcp: ")
            && line.contains("onnection refused"),
        "{description}"
    );
    check!(
        !description.contains("::"),
        "a Rust type name in:\n{description}"
    );
    check!(!description.contains("Transport ["), "{description}");
    // The namespaces exist in the sandbox.
    let kinds = mcp
        .value("[typeof crash, typeof remote, typeof alpha]")
        .await?;
    check!(kinds == json!(["object", "object", "object"]), "{kinds}");
    // A call on one fails with tool_error saying why, without reaching anything.
    let refused = mcp
        .value("try { await crash.anything({}); return 'ran' } catch (e) { return [e.code, e.reason, e.message] }")
        .await?;
    check!(
        refused[0] == "tool_error"
            && refused[1] == "unavailable"
            && refused[2].as_str().is_some_and(|m| m
                .starts_with("crash is unavailable: MCP server \"crash\": exited with status 3")),
        "{refused}"
    );
    let found = search(&mcp, "crash").await?;
    check!(
        found.text.starts_with("\"crash\" is the namespace crash (MCP server \"crash\"), which is unavailable: exited with status 3"),
        "{}",
        found.text
    );
    let sum = mcp.value("(await alpha.add({ a: 1, b: 1 })).sum").await?;
    check!(sum == json!(2), "{sum}");
    Ok(())
}

pub async fn the_prompt_never_says_a_declared_namespace_is_missing(
    h: Harness,
) -> Result<(), String> {
    let tools = h.write(
        "tools.yaml",
        "version: 1\n\
         providers:\n\
         \x20 fs:\n\
         \x20   tools:\n\
         \x20     read-file:\n\
         \x20       command: /bin/cat\n\
         \x20       requires_approval: true\n\
         \x20       rate_limit: { requests: 5, window: 1h }\n",
    );
    let out = Command::new(EXECBOX)
        .args(["types", "--prompt", "--tools", tools.to_str().unwrap()])
        .output()
        .await
        .map_err(|e| e.to_string())?;
    let prompt = String::from_utf8_lossy(&out.stdout).into_owned();
    check!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check!(prompt.contains("declare namespace fs {"), "{prompt}");
    check!(!prompt.contains("or `fs`"), "{prompt}");
    check!(
        prompt.contains("- No network, file or process access: no `fetch`, `XMLHttpRequest` or `process`.\n- `fs` below is a tool namespace declared here"),
        "{prompt}"
    );
    check!(prompt.contains("@remarks needs approval"), "{prompt}");
    check!(
        prompt.contains("@remarks rate limited: 5 per 1h"),
        "{prompt}"
    );
    Ok(())
}

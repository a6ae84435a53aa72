//! PostgreSQL for the tests of several gateways on one database: a throwaway cluster made by
//! `scripts/postgres.sh` (initdb into a temp dir, its own port and socket dir, stopped when
//! dropped), and a fresh database per test. The test command starts one cluster for the whole
//! run (`AIRLOCK_TEST_DATABASE_URL`); without it, each test starts its own. The cluster bench
//! (`benches/benches/cluster_load.rs`) uses this file too.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    // Both users of this file sit one level below the workspace root.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh")
}

/// A PostgreSQL cluster of this test's own.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// Its connection string (to the `postgres` database, over its Unix socket).
    pub url: String,
    /// The certificate and key it serves TLS with, if any.
    tls: Option<(PathBuf, PathBuf)>,
    /// What a new cluster asks of TCP clients (`PG_HOST_AUTH`); none: trust.
    host_auth: Option<&'static str>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(None)
    }

    /// A cluster whose TCP clients must sign in as `method` asks (`scram-sha-256`: a role's
    /// password), as a deployment's would; its socket stays trusted, for setting roles up.
    pub fn start_host_auth(method: &'static str) -> Cluster {
        let mut c = Cluster::new(None);
        c.host_auth = Some(method);
        c.url = c.up();
        c
    }

    /// A cluster that also serves TLS on its TCP port with `cert` and `key` (PEM).
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Cluster {
        Cluster::start_with(Some((cert.to_path_buf(), key.to_path_buf())))
    }

    fn start_with(tls: Option<(PathBuf, PathBuf)>) -> Cluster {
        let mut c = Cluster::new(tls);
        c.url = c.up();
        c
    }

    fn new(tls: Option<(PathBuf, PathBuf)>) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("airlock-pg")
            .tempdir()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Cluster {
            dir,
            port,
            url: String::new(),
            tls,
            host_auth: None,
        }
    }

    fn up(&self) -> String {
        let mut cmd = Command::new("bash");
        cmd.arg(script()).args([
            "start",
            self.dir.path().to_str().unwrap(),
            &self.port.to_string(),
        ]);
        if let Some((cert, key)) = &self.tls {
            cmd.env("PG_SSL_CERT", cert).env("PG_SSL_KEY", key);
        }
        if let Some(method) = self.host_auth {
            cmd.env("PG_HOST_AUTH", method);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "PostgreSQL did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Stops the server (fast shutdown: clients are disconnected).
    /// A login role that is no superuser and cannot create databases or roles, signing in with
    /// `password` (made over the trusted socket).
    pub fn create_role(&self, role: &str, password: &str) {
        let mut admin = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE"
            ))
            .unwrap();
    }

    /// A fresh database `name` owned by `role`.
    pub fn create_database(&self, name: &str, owner: &str) {
        let mut admin = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name} OWNER {owner}"))
            .unwrap();
    }

    pub fn stop(&self) {
        let status = Command::new("bash")
            .arg(script())
            .args(["stop", self.dir.path().to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Starts it again on the same data and port.
    pub fn restart(&self) {
        self.up();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh, empty database, on the run's cluster or on one of its own.
pub struct Database {
    _cluster: Option<Cluster>,
    /// The connection string of the fresh database.
    pub url: String,
    /// Its name.
    pub name: String,
    /// Who connects over TCP, as connection-string words: `user=postgres` (trusted), or a
    /// role and its password ([`Database::owned_by_role`]).
    pub login: String,
}

impl Database {
    pub fn fresh() -> Database {
        let (cluster, base) = match std::env::var("AIRLOCK_TEST_DATABASE_URL") {
            Ok(url) => (None, url),
            Err(_) => {
                let c = Cluster::start();
                let url = c.url.clone();
                (Some(c), url)
            }
        };
        Database::create_in(cluster, &base)
    }

    /// A fresh database owned by `role` (made here, not a superuser, signing in with
    /// `password`), in a cluster that asks TCP clients for a password: the way a deployment
    /// starts. `url` is the trusted socket's, for setting things up; `login` is the role's.
    pub fn owned_by_role(role: &str, password: &str) -> Database {
        let cluster = Cluster::start_host_auth("scram-sha-256");
        cluster.create_role(role, password);
        let name = format!("deploy_{}", std::process::id());
        cluster.create_database(&name, role);
        let url = format!(
            "{} dbname={name}",
            cluster.url.replace(" dbname=postgres", "")
        );
        Database {
            _cluster: Some(cluster),
            url,
            name,
            login: format!("user={role} password={password}"),
        }
    }

    /// A fresh database in `cluster`, which the caller keeps.
    pub fn in_cluster(cluster: &Cluster) -> Database {
        Database::create_in(None, &cluster.url)
    }

    fn create_in(cluster: Option<Cluster>, base: &str) -> Database {
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let mut client = postgres::Client::connect(base, postgres::NoTls).unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        Database {
            _cluster: cluster,
            url: format!("{base} dbname={name}"),
            name,
            login: "user=postgres".into(),
        }
    }
}

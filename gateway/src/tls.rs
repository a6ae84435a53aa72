//! The gateway's own TLS certificate (`[server] tls`): read from its PEM files at start, and
//! read again on every reload (SIGHUP, `POST /v1/policy/reload`), so a renewed certificate
//! serves new connections at once and a connection already open keeps the one it shook hands
//! with. A reload whose files do not read, or do not match, keeps the certificate in force.
//!
//! It does not accept connections (`crate::serve` does, through [`Certs::acceptor`]) and it
//! verifies no client certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// The certificate in force, and the files it comes from.
pub struct Certs {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
}

impl std::fmt::Debug for Certs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certs")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Certs {
    /// Reads `cert` (a PEM chain) and `key` (a PEM private key).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Certs>, String> {
        Ok(Arc::new(Certs {
            current: ArcSwap::from_pointee(read(cert, key)?),
            cert: cert.to_owned(),
            key: key.to_owned(),
        }))
    }

    /// Reads the files again; the new certificate serves every connection from now on. On
    /// an error the certificate in force stays. True when the files held another one.
    pub fn reload(&self) -> Result<bool, String> {
        let fresh = read(&self.cert, &self.key)?;
        let changed = fresh.cert != self.current.load().cert;
        self.current.store(Arc::new(fresh));
        Ok(changed)
    }

    /// The acceptor of new connections: HTTP/2 or HTTP/1.1, with the certificate in force at
    /// each handshake.
    pub fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A certificate chain and its key, checked to belong together.
fn read(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let bytes = |p: &Path| {
        std::fs::read(p).map_err(|e| format!("server.tls: cannot read {}: {e}", p.display()))
    };
    let certs = rustls_pemfile::certs(&mut bytes(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("server.tls.cert: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "server.tls.cert: no certificate in {}",
            cert.display()
        ));
    }
    let key = rustls_pemfile::private_key(&mut bytes(key)?.as_slice())
        .map_err(|e| format!("server.tls.key: {e}"))?
        .ok_or("server.tls.key: no private key in the file")?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let certified = CertifiedKey::from_der(certs, key, &provider)
        .map_err(|e| format!("server.tls: the key does not fit the certificate: {e}"))?;
    Ok(certified)
}

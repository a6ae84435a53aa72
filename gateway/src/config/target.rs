//! A backend URL of `[[tools]]`, parsed once when the config loads (and refused there when it
//! does not parse), and the names of the demo tools the gateway serves itself. Only parsing:
//! connecting is `crate::backends::http`'s.

use crate::urlencoded::decode_percent;

/// Demo tools the gateway serves itself.
pub const BUILTINS: [&str; 3] = ["demo.echo", "demo.shell_preview", "demo.deploy"];

/// Where a backend URL points: parsed once, when the config loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `scheme://host:port`, the pool's key.
    pub(crate) origin: String,
    /// The `host` header: the URL's host and port, without credentials.
    pub(crate) authority: String,
    pub(crate) path: String,
    /// `Basic …`, from credentials in the URL (`https://user:password@host/`).
    pub(crate) basic: Option<String>,
}

impl Target {
    /// Why `url` cannot be a backend, or where it points.
    pub fn parse(url: &str) -> Result<Target, String> {
        let bad = |why: &str| format!("the backend URL `{url}` {why}");
        let uri: hyper::Uri = url.parse().map_err(|_| bad("is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("is neither http nor https")),
        };
        let authority = uri.authority().ok_or_else(|| bad("names no host"))?;
        let (userinfo, hostport) = match authority.as_str().rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, authority.as_str()),
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("names no host"));
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let basic = userinfo.map(|u| {
            use base64::Engine as _;
            let (user, password) = u.split_once(':').unwrap_or((u, ""));
            let pair = format!("{}:{}", decode_percent(user), decode_percent(password));
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        Ok(Target {
            tls,
            host: host.to_owned(),
            port,
            origin: format!("{}://{}:{port}", if tls { "https" } else { "http" }, host),
            authority: hostport.to_owned(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
            basic,
        })
    }
}

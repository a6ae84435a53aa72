//! What a reload takes from the config file besides the policy (DESIGN §23, secrets rotate
//! without a restart): SIGHUP, the policy file watch and `POST /v1/policy/reload` read
//! `airlock.toml` again and put in force its `[[principals]]` (tokens, roles, groups, agents,
//! limits), its `[[issuers]]`, its `[[webhooks]]` (URLs, events, secrets) and the TLS
//! certificate files. A removed token is refused at once, a new one works at once, and calls
//! already held stay held.
//!
//! Everything else in the file is read at start only: a change to it is named (in the log and
//! in the reload's answer) as needing a restart, and the running values stay. A file that no
//! longer validates changes nothing at all.
//!
//! It does not reload the policy (`Gateway::reload` does, beside it) or touch the store.

use std::sync::Arc;

use crate::config::Config;
use crate::state::Gateway;

/// What a reload of the config file did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconfigured {
    /// The parts put in force (that changed since the last reload or the start).
    pub reloaded: Vec<&'static str>,
    /// The parts that changed and need a restart to take effect; the running values stay.
    pub restart_needed: Vec<&'static str>,
    /// Why the file could not be applied, if it could not (nothing changed then).
    pub error: Option<String>,
}

/// Reads the config file again (a gateway started without one, the demo, has nothing to
/// read) and puts its reloadable parts in force.
pub fn reload(gw: &Arc<Gateway>) -> Reconfigured {
    let Some(file) = gw.config.file.clone() else {
        return Reconfigured::default();
    };
    let mut fresh = match Config::load(&file) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                file = %file.display(),
                "the config file does not load; its principals, issuers, webhooks and TLS files stay as they were: {e}"
            );
            return Reconfigured {
                error: Some(e.to_string()),
                ..Default::default()
            };
        }
    };
    // What the command line set stays set.
    if gw.config.overridden.contains(&"server.listen") {
        fresh.listen = gw.config.listen;
    }
    if gw.config.overridden.contains(&"server.data_dir") {
        fresh.data_dir = gw.config.data_dir.clone();
    }
    let mut applied = gw.applied.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Reconfigured {
        restart_needed: needs_restart(&applied, &fresh),
        ..Default::default()
    };
    let issuers_changed = applied.issuers != fresh.issuers;
    if applied.principals != fresh.principals || issuers_changed {
        if let Err(e) = gw.auth.replace(&fresh, issuers_changed) {
            tracing::error!("the reloaded issuers cannot be used; nothing changed: {e}");
            out.error = Some(e);
            return out;
        }
        gw.limits
            .reconfigure(&fresh.principals, &fresh.issuers, std::time::Instant::now());
        if applied.principals != fresh.principals {
            out.reloaded.push("principals");
        }
        if issuers_changed {
            out.reloaded.push("issuers");
            // Each issuer's keys are fetched now, so its first token waits for no fetch.
            for issuer in gw.auth.issuers().list.iter().cloned() {
                tokio::spawn(async move {
                    let _ = issuer.keys.refresh(true).await;
                });
            }
        }
    }
    if applied.webhooks != fresh.webhooks {
        gw.webhooks.replace(fresh.webhooks.clone());
        out.reloaded.push("webhooks");
    }
    if let Some(certs) = &gw.tls {
        if fresh.tls == applied.tls {
            match certs.reload() {
                Ok(true) => out.reloaded.push("server.tls"),
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(
                        "the TLS files do not load; the certificate in force stays: {e}"
                    );
                    out.error = Some(e);
                }
            }
        }
    }
    // What needs a restart is left as it runs: the applied config keeps the running values,
    // so the next reload names them again until the gateway restarts.
    let running = applied.clone();
    *applied = Config {
        principals: fresh.principals,
        issuers: fresh.issuers,
        webhooks: fresh.webhooks,
        ..running
    };
    if !out.reloaded.is_empty() {
        tracing::info!(reloaded = ?out.reloaded, "config reloaded");
    }
    if !out.restart_needed.is_empty() {
        tracing::warn!(
            restart_needed = ?out.restart_needed,
            "these config changes take effect only after a restart; the running values stay"
        );
    }
    out
}

/// The parts of the file read at start only that differ between `running` and `fresh`, by
/// their config keys.
fn needs_restart(running: &Config, fresh: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut differs = |changed: bool, key: &'static str| {
        if changed {
            out.push(key);
        }
    };
    differs(running.listen != fresh.listen, "server.listen");
    differs(running.data_dir != fresh.data_dir, "server.data_dir");
    differs(running.store != fresh.store, "store");
    differs(running.policy != fresh.policy, "server.policy");
    differs(
        running.shadow_policy != fresh.shadow_policy,
        "server.shadow_policy",
    );
    differs(running.tls != fresh.tls, "server.tls");
    differs(
        running.max_held != fresh.max_held
            || running.max_held_per_principal != fresh.max_held_per_principal
            || running.max_in_flight != fresh.max_in_flight
            || running.max_body_bytes != fresh.max_body_bytes
            || running.hold_timeout != fresh.hold_timeout
            || running.max_hold != fresh.max_hold
            || running.public_url != fresh.public_url,
        "server",
    );
    differs(running.tools != fresh.tools, "tools");
    differs(running.mcp_servers != fresh.mcp_servers, "mcp_servers");
    differs(running.classifiers != fresh.classifiers, "classifiers");
    differs(running.redact != fresh.redact, "audit");
    differs(running.inbox_oidc != fresh.inbox_oidc, "inbox.oidc");
    // Their types hold secrets and compare by what they print (compared, never logged).
    differs(
        format!("{:?}", running.email) != format!("{:?}", fresh.email),
        "email",
    );
    differs(
        format!("{:?}", running.slack) != format!("{:?}", fresh.slack),
        "slack",
    );
    out
}

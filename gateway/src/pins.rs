//! The gateway's side of MCP tool definition pins (DESIGN §20): loading the pins from the
//! store at start, telling the store what each list refresh found that is not pinned (it pins
//! a first sight and opens one review per change, [`airlock_storage::Store::see_tool`]),
//! announcing the reviews it opens, and taking a decided review's pin back. A call refused
//! for a held definition reads the pin again first: another gateway on the same store may
//! have approved the change since.
//!
//! What a pin allows (shown, called, refused) is judged in [`crate::backends::mcp::pins`];
//! the review is decided through the one verdict ([`crate::pipeline::decide`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use airlock_storage::{Approval, ApprovalKind, Kind, PinSeen, ToolPin};
use serde_json::Value;

use crate::backends::mcp::pins::Gate;
use crate::backends::mcp::{Listed, McpTool, Server};
use crate::clock::now_ms;
use crate::config::PinMode;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// How long a review stays open; expired, the tool stays refused and the next list that
/// shows the change opens another.
pub const REVIEW_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Reaches every upstream and settles its tools' pins, before the gateway serves: pins are
/// loaded from the store first, so an upstream that cannot be reached keeps its pinned tools.
pub async fn start(gw: &Arc<Gateway>) -> Result<(), String> {
    let pins = gw
        .store_op(|s| s.tool_pins())
        .await
        .map_err(|e| format!("cannot read the tool pins: {}", e.message))?;
    for pin in pins {
        if let Some(s) = gw
            .backends
            .mcp
            .servers
            .iter()
            .find(|s| s.config.name == pin.server && s.config.pin != PinMode::Off)
        {
            s.set_pin(pin);
        }
    }
    gw.backends.mcp.start().await?;
    for s in &gw.backends.mcp.servers {
        settle(gw, s).await;
    }
    gw.backends.mcp.check_unique()
}

/// Reads each upstream's lists again (every `refresh`, and when it says one changed) and
/// settles what they show.
pub async fn refresh_loop(gw: Arc<Gateway>) {
    let after_gw = gw.clone();
    let after = Arc::new(move |s: Arc<Server>| {
        let gw = after_gw.clone();
        Box::pin(async move { settle(&gw, &s).await })
            as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
    });
    gw.backends
        .mcp
        .clone()
        .refresh_loop(gw.shutdown.clone(), after)
        .await;
}

/// What the store is told of a listed tool of `s`.
fn seen(s: &Server, listed: &Listed) -> PinSeen {
    let name = listed
        .definition
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut definition = (*listed.definition).clone();
    if let Some(o) = definition.as_object_mut() {
        o.remove("_meta");
    }
    PinSeen {
        server: s.config.name.clone(),
        visible: format!("{}{name}", s.config.prefix),
        tool: name,
        definition,
        fingerprint: listed.fingerprint.clone(),
        trust_first: s.config.trust_first,
        reviewers: s.config.reviewers.iter().cloned().collect::<BTreeSet<_>>(),
        review_ttl_ms: REVIEW_TTL.as_millis() as u64,
    }
}

/// `POST /v1/tools/{name}/review` (an admin's): opens a review of the tool's current
/// definition (one a reviewer declined is reviewed again). `tool.unknown` for a name no
/// upstream lists; `400 approval.invalid_state` when the current definition is the pinned
/// one, or the server pins nothing. The review open for that definition, if one is.
pub async fn reopen(gw: &Arc<Gateway>, visible: &str) -> Result<Approval, ApiError> {
    let unknown = || {
        ApiError::new(
            Code::ToolUnknown,
            format!("no MCP upstream lists a tool `{visible}`"),
        )
    };
    let (s, listed) = gw
        .backends
        .mcp
        .servers
        .iter()
        .find_map(|s| {
            let name = visible.strip_prefix(s.config.prefix.as_str())?;
            Some((s.clone(), s.listed(name)?))
        })
        .ok_or_else(unknown)?;
    if s.config.pin == PinMode::Off {
        return Err(ApiError::new(
            Code::ApprovalInvalidState,
            format!(
                "MCP server `{}` pins nothing (`pin = \"off\"`): there is no review",
                s.config.name
            ),
        ));
    }
    let seen = seen(&s, &listed);
    let (server, tool) = (seen.server.clone(), seen.tool.clone());
    let now = now_ms();
    let review = gw
        .store_op(move |st| st.reopen_tool_review(seen, now))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                Code::ApprovalInvalidState,
                format!("`{visible}` lists its pinned definition: there is nothing to review"),
            )
        })?;
    reload(gw, &server, &tool).await;
    if review.created_at == now {
        opened(gw, &s, &review).await;
    }
    Ok(review)
}

/// Tells the store of every listed tool of `s` whose definition is not the pinned one (or
/// not judged yet), keeps the pins it answers, and announces the reviews it opened. A store
/// that fails leaves those tools held (under `enforce`); the next refresh tries again.
pub async fn settle(gw: &Arc<Gateway>, s: &Arc<Server>) {
    for listed in s.unsettled() {
        let seen = seen(s, &listed);
        let now = now_ms();
        match gw.store_op(move |st| st.see_tool(seen, now)).await {
            Ok(seen) => {
                s.set_pin(seen.pin);
                if let Some(review) = seen.opened {
                    opened(gw, s, &review).await;
                }
            }
            Err(e) => tracing::error!(
                server = %s.config.name,
                code = e.code.as_str(),
                "cannot record a tool definition's pin: {}",
                e.message
            ),
        }
    }
    s.mark_settled();
}

/// A review opened: counted, logged, and announced like any approval (the event stream and
/// webhooks, `approval.requested` with its kind).
async fn opened(gw: &Arc<Gateway>, s: &Server, review: &Approval) {
    gw.metrics
        .tool_definitions
        .with_label_values(&[s.config.name.as_str(), "changed"])
        .inc();
    tracing::warn!(
        server = %s.config.name,
        tool = %review.tool,
        approval_id = %review.id,
        fingerprint = %review.fingerprint,
        pin = s.config.pin.as_str(),
        "an MCP tool's definition is not the pinned one; a review is open"
    );
    let event = gw.approval_event(review);
    gw.announce(Kind::ApprovalRequested, event).await;
}

/// A review decided on this gateway: its tool's pin, as the decision left it, is kept.
pub async fn reviewed(gw: &Arc<Gateway>, a: &Approval) {
    if a.kind != ApprovalKind::ToolDefinition {
        return;
    }
    let server = a.args["server"].as_str().unwrap_or_default().to_owned();
    let tool = a.args["tool"].as_str().unwrap_or_default().to_owned();
    reload(gw, &server, &tool).await;
}

/// How often a gateway on a shared store reads every pin again: a review decided on another
/// gateway reaches this one's lists within this long.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// On a store shared by several gateways (PostgreSQL), reads the pins every [`FOLLOW_EVERY`]
/// and keeps those another gateway changed (a review opened or decided there), so this
/// gateway's lists and calls follow at once, not at its next list refresh. One read of the
/// few pins' keys; nothing on fjall, where every decision is this gateway's own.
pub async fn follow_store(gw: Arc<Gateway>) {
    if !matches!(gw.config.store, crate::config::StoreKind::Postgres { .. })
        || gw.backends.mcp.servers.is_empty()
    {
        return;
    }
    let mut tick = tokio::time::interval(FOLLOW_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = gw.shutdown.cancelled() => return,
        }
        let Ok(pins) = gw.store_op(|s| s.tool_pins()).await else {
            continue;
        };
        for pin in pins {
            let Some(s) = gw
                .backends
                .mcp
                .servers
                .iter()
                .find(|s| s.config.name == pin.server && s.config.pin != PinMode::Off)
            else {
                continue;
            };
            if s.pins().get(&pin.tool) != Some(&pin) {
                s.set_pin(pin);
            }
        }
    }
}

/// Reads one pin from the store again and keeps it: a review decided (or opened) on
/// another gateway reaches this one's lists as soon as its record is told here.
pub(crate) async fn reload(gw: &Arc<Gateway>, server: &str, tool: &str) -> Option<ToolPin> {
    let s = gw
        .backends
        .mcp
        .servers
        .iter()
        .find(|s| s.config.name == server)?;
    let (sv, t) = (server.to_owned(), tool.to_owned());
    match gw.store_op(move |st| st.tool_pin(&sv, &t)).await {
        Ok(Some(pin)) => {
            s.set_pin(pin.clone());
            Some(pin)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::error!(
                code = e.code.as_str(),
                "cannot read a tool's pin: {}",
                e.message
            );
            None
        }
    }
}

/// Whether a call to `tool` goes on: `Ok` with the tool as it now stands, or the refusal
/// (`tool.definition_changed`, or `upstream.unavailable` for an upstream never reached). A
/// held tool's pin is read again first: a reviewer may have approved on another gateway.
/// Asked at intake and again when the call runs (`running`), which is when a call run under
/// `pin = "warn"` on a definition not pinned is counted and logged.
pub async fn admit(
    gw: &Arc<Gateway>,
    tool: McpTool,
    visible: &str,
    running: bool,
) -> Result<McpTool, ApiError> {
    let tool = match tool.gate {
        Gate::Held { .. } => {
            reload(gw, &tool.server.config.name, &tool.name).await;
            gw.backends.mcp.resolve(visible).unwrap_or(tool)
        }
        _ => tool,
    };
    let server = tool.server.config.name.as_str();
    if let (Gate::Open { changed: true }, true) = (&tool.gate, running) {
        if tool.server.config.pin == PinMode::Warn {
            gw.metrics
                .tool_definitions
                .with_label_values(&[server, "unpinned"])
                .inc();
            tracing::warn!(
                server,
                tool = visible,
                "a call runs on a definition not pinned (pin = \"warn\")"
            );
        }
    }
    match tool.gate.refusal(visible, server, |id| {
        crate::approvals::inbox_link(&gw.config, id)
    }) {
        None => Ok(tool),
        Some(e) => {
            if matches!(tool.gate, Gate::Held { .. }) {
                gw.metrics
                    .tool_definitions
                    .with_label_values(&[server, "refused"])
                    .inc();
            }
            Err(e)
        }
    }
}

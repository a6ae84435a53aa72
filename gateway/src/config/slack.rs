//! The `[slack]` table (DESIGN §22): the Slack app airlock posts approvals as (its bot token and
//! signing secret, both `env:` references), where Slack's Web API is, the channel of each
//! approver group, and which Slack users are which approver principals. Checked here against
//! the principals and issuers; messages and interactions are [`crate::slack`]'s.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{err, ConfigError, IssuerConfig, PrincipalConfig};

/// Slack's Web API.
pub const SLACK_API: &str = "https://slack.com/api";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlack {
    bot_token: String,
    signing_secret: String,
    api_url: Option<String>,
    channel: Option<String>,
    #[serde(default)]
    channels: BTreeMap<String, String>,
    #[serde(default)]
    users: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct SlackConfig {
    /// `xoxb-…`, from the environment.
    pub bot_token: String,
    /// The app's signing secret, from the environment.
    pub signing_secret: String,
    /// Slack's Web API, without a trailing `/` (`https://slack.com/api`).
    pub api_url: String,
    /// Where approvals go that any approver may decide, and those of a group without a
    /// channel of its own.
    pub channel: Option<String>,
    /// The channel of each approver group.
    pub channels: BTreeMap<String, String>,
    /// Slack user id → approver principal id (`alice`, or `corp:alice` of an issuer).
    pub users: BTreeMap<String, String>,
}

impl SlackConfig {
    /// The channels an approval of `groups` is posted to (none: the default channel).
    pub fn channels_for(&self, groups: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = if groups.is_empty() {
            self.channel.iter().cloned().collect()
        } else {
            groups
                .iter()
                .filter_map(|g| self.channels.get(*g).or(self.channel.as_ref()))
                .cloned()
                .collect()
        };
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// A Slack id: an upper-case letter from `first`, then upper-case letters and digits.
fn slack_id(s: &str, first: &[char]) -> bool {
    s.len() >= 3
        && s.starts_with(first)
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// A secret that must come from the environment: `env:VAR`, never the value itself.
fn env_secret(key: &str, value: &str) -> Result<String, ConfigError> {
    let Some(var) = value.strip_prefix("env:") else {
        return Err(err(
            key,
            "must be an `env:VARIABLE` reference: a Slack secret is never written in the config",
        ));
    };
    std::env::var(var).map_err(|_| err(key, format!("environment variable `{var}` is not set")))
}

/// Each Slack user id, and the approver principal it is mapped to: configured, not an agent,
/// or of a configured issuer.
fn check_users(
    users: &BTreeMap<String, String>,
    principals: &[PrincipalConfig],
    issuers: &[IssuerConfig],
) -> Result<(), ConfigError> {
    for (user, principal) in users {
        let key = format!("slack.users.{user}");
        if !slack_id(user, &['U', 'W']) {
            return Err(err(
                key,
                format!("`{user}` is not a Slack user id (U… or W…, from the user's profile)"),
            ));
        }
        match principal.split_once(':') {
            Some((issuer, sub)) => {
                if sub.is_empty() || !issuers.iter().any(|i| i.id == issuer) {
                    return Err(err(
                        key,
                        format!("`{principal}` names no configured issuer's principal (`<issuer>:<sub>`)"),
                    ));
                }
            }
            None => match principals.iter().find(|p| &p.id == principal) {
                None => {
                    return Err(err(
                        key,
                        format!("`{principal}` is not a configured principal"),
                    ))
                }
                Some(p) if p.role == "agent" => {
                    return Err(err(
                        key,
                        format!("`{principal}` is an agent: only approvers and admins decide"),
                    ))
                }
                Some(_) => {}
            },
        }
    }
    Ok(())
}

pub(super) fn validate(
    raw: Option<RawSlack>,
    principals: &[PrincipalConfig],
    issuers: &[IssuerConfig],
) -> Result<Option<SlackConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    let api_url = r
        .api_url
        .unwrap_or_else(|| SLACK_API.to_owned())
        .trim_end_matches('/')
        .to_owned();
    let plain_loopback = ["http://127.0.0.1:", "http://localhost:", "http://[::1]:"]
        .iter()
        .any(|p| api_url.starts_with(p));
    if !api_url.starts_with("https://") && !plain_loopback {
        return Err(err(
            "slack.api_url",
            format!("`{api_url}` must be an https:// URL (plain http only on loopback)"),
        ));
    }
    let channel_ok = |key: String, c: &str| {
        if slack_id(c, &['C', 'G']) {
            Ok(())
        } else {
            Err(err(
                key,
                format!("`{c}` is not a channel id (C…): give the id from the channel's details, not its name, which can change"),
            ))
        }
    };
    if let Some(c) = &r.channel {
        channel_ok("slack.channel".into(), c)?;
    }
    for (group, c) in &r.channels {
        channel_ok(format!("slack.channels.{group}"), c)?;
    }
    if r.channel.is_none() && r.channels.is_empty() {
        return Err(err(
            "slack.channel",
            "names no channel: give a default `channel` or `channels = { finance = \"C0FIN\" }`",
        ));
    }
    if r.users.is_empty() {
        return Err(err(
            "slack.users",
            "maps no Slack user to an approver, so nobody could decide in Slack: `users = { \"U024BE7LH\" = \"alice\" }`",
        ));
    }
    check_users(&r.users, principals, issuers)?;
    let bot_token = env_secret("slack.bot_token", &r.bot_token)?;
    if !bot_token.starts_with("xoxb-") {
        return Err(err(
            "slack.bot_token",
            "is not a bot token (`xoxb-…`, under OAuth & Permissions of the Slack app)",
        ));
    }
    let signing_secret = env_secret("slack.signing_secret", &r.signing_secret)?;
    if signing_secret.len() < 16 {
        return Err(err(
            "slack.signing_secret",
            "is too short to be a Slack signing secret (Basic Information → App Credentials)",
        ));
    }
    Ok(Some(SlackConfig {
        bot_token,
        signing_secret,
        api_url,
        channel: r.channel,
        channels: r.channels,
        users: r.users,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principals() -> Vec<PrincipalConfig> {
        [("alice", "approver"), ("bot", "agent")]
            .into_iter()
            .map(|(id, role)| PrincipalConfig {
                id: id.into(),
                role: role.into(),
                token_sha256: String::new(),
                groups: vec!["dba".into()],
                rate: None,
                max_pending: None,
                agents: vec![],
            })
            .collect()
    }

    fn check(table: &str) -> Result<Option<SlackConfig>, ConfigError> {
        let raw: RawSlack = toml::from_str(table).unwrap();
        validate(Some(raw), &principals(), &[])
    }

    const OK: &str = "bot_token = \"env:AIRLOCK_TEST_UNSET_TOKEN\"\nsigning_secret = \"env:AIRLOCK_TEST_UNSET_SECRET\"\n";

    #[test]
    fn each_refusal_names_its_key() {
        let cases = [
            ("channel = \"C0A\"\nusers = { \"U01\" = \"alice\" }\napi_url = \"http://slack.example/api\"", "slack.api_url", "https://"),
            ("channel = \"#approvals\"\nusers = { \"U01\" = \"alice\" }", "slack.channel", "not a channel id"),
            ("channels = { dba = \"approvals\" }\nusers = { \"U01\" = \"alice\" }", "slack.channels.dba", "not a channel id"),
            ("users = { \"U01\" = \"alice\" }", "slack.channel", "names no channel"),
            ("channel = \"C0A\"", "slack.users", "maps no Slack user"),
            ("channel = \"C0A\"\nusers = { \"alice\" = \"alice\" }", "slack.users.alice", "not a Slack user id"),
            ("channel = \"C0A\"\nusers = { \"U01\" = \"carol\" }", "slack.users.U01", "not a configured principal"),
            ("channel = \"C0A\"\nusers = { \"U01\" = \"bot\" }", "slack.users.U01", "is an agent"),
            ("channel = \"C0A\"\nusers = { \"U01\" = \"corp:alice\" }", "slack.users.U01", "no configured issuer"),
            // Shape first, then the secrets, which must come from the environment.
            ("channel = \"C0A\"\nusers = { \"U01\" = \"alice\" }", "slack.bot_token", "`AIRLOCK_TEST_UNSET_TOKEN` is not set"),
        ];
        for (rest, key, part) in cases {
            let e = check(&format!("{OK}{rest}")).unwrap_err();
            assert_eq!(e.key, key, "{rest}: {e:?}");
            assert!(e.message.contains(part), "{rest}: {e:?}");
        }
        let literal = "bot_token = \"xoxb-1-2-3\"\nsigning_secret = \"env:X\"\nchannel = \"C0A\"\nusers = { \"U01\" = \"alice\" }";
        let e = check(literal).unwrap_err();
        assert_eq!(e.key, "slack.bot_token");
        assert!(e.message.contains("env:"), "{e:?}");
        assert!(
            toml::from_str::<RawSlack>(&format!("{OK}bogus = 1")).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn channels_by_group_fall_back_to_the_default() {
        let c = SlackConfig {
            bot_token: String::new(),
            signing_secret: String::new(),
            api_url: SLACK_API.into(),
            channel: Some("C0ALL".into()),
            channels: [("dba".to_owned(), "C0DBA".to_owned())].into(),
            users: BTreeMap::new(),
        };
        assert_eq!(c.channels_for(&[]), ["C0ALL"]);
        assert_eq!(c.channels_for(&["dba"]), ["C0DBA"]);
        assert_eq!(c.channels_for(&["dba", "ops"]), ["C0ALL", "C0DBA"]);
        let only = SlackConfig { channel: None, ..c };
        assert_eq!(only.channels_for(&["ops"]), Vec::<String>::new());
    }
}

//! The Slack stand-in (`tests/peers/slack_api.py`) as the tests drive it: started beside a
//! gateway whose port is known first, asked what it holds, told to click and submit.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{free_port, peers, wait_for_line};

pub const TOKEN: &str = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy";
pub const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// Slack users of the tests' workspace and who they are to airlock.
pub const USERS: &str = "users = { \"U0DBA1\" = \"dba1\", \"U0DBA2\" = \"dba2\", \"U0FIN1\" = \"fin1\", \"U0FIN2\" = \"fin2\", \"U0ADMIN\" = \"admin\", \"U0OPS\" = \"ops\" }";

pub struct Slack {
    child: Child,
    pub port: u16,
    client: reqwest::blocking::Client,
}

impl Drop for Slack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Slack {
    pub fn start(gateway_port: u16) -> Slack {
        let port = free_port();
        let mut child = Command::new("python3")
            .arg(peers().join("slack_api.py"))
            .arg(port.to_string())
            .env("SLACK_BOT_TOKEN", TOKEN)
            .env("SLACK_SIGNING_SECRET", SECRET)
            .env(
                "INTERACTIONS_URL",
                format!("http://127.0.0.1:{gateway_port}/slack/interactions"),
            )
            .env("SLACK_CHANNELS", "C0DBA,C0FIN,C0ALL")
            .env(
                "SLACK_MEMBERS",
                "U0DBA1,U0DBA2,U0FIN1,U0FIN2,U0ADMIN,U0OPS,U0NOBODY,U0ALICE",
            )
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with slack_sdk (installed by scripts/test.sh)");
        wait_for_line(&mut child, "listening");
        Slack {
            child,
            port,
            client: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    pub fn get(&self, what: &str) -> Value {
        self.client
            .get(format!("http://127.0.0.1:{}/_test/{what}", self.port))
            .send()
            .unwrap()
            .json()
            .unwrap()
    }

    pub fn post(&self, what: &str, body: Value) -> Value {
        self.client
            .post(format!("http://127.0.0.1:{}/_test/{what}", self.port))
            .json(&body)
            .send()
            .unwrap()
            .json()
            .unwrap()
    }

    /// The messages of one approval (its id is every button's value and in its link).
    pub fn messages_of(&self, approval: &str) -> Vec<Value> {
        self.get("messages")
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m.to_string().contains(approval))
            .cloned()
            .collect()
    }

    /// Waits until `approval` has a message whose latest version satisfies `ok`.
    pub fn wait_message(&self, approval: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            if let Some(m) = self
                .messages_of(approval)
                .into_iter()
                .find(|m| ok(m["versions"].as_array().unwrap().last().unwrap()))
            {
                return m;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no message {what} for {approval}: {:?}",
                self.messages_of(approval)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn ephemeral_to(&self, user: &str) -> Vec<String> {
        self.get("ephemeral")
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["user"] == user)
            .map(|e| e["text"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits for a private message to `user` that contains `part`.
    pub fn wait_told(&self, user: &str, part: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(t) = self
                .ephemeral_to(user)
                .into_iter()
                .find(|t| t.contains(part))
            {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{user} was not told `{part}`: {:?}",
                self.ephemeral_to(user)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn click(&self, m: &Value, user: &str, action: &str, more: Value) -> Vec<Value> {
        let mut req =
            json!({"user": user, "channel": m["channel"], "ts": m["ts"], "action_id": action});
        for (k, v) in more.as_object().unwrap() {
            req[k] = v.clone();
        }
        let out = self.post("click", req);
        assert!(out["results"].is_array(), "{out}");
        out["results"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().clone())
            .collect()
    }
}

/// The `[slack]` table for a stand-in on `slack_port`, with `users`.
pub fn slack_table(slack_port: u16, users: &str) -> String {
    format!(
        "[slack]\nbot_token = \"env:TEST_SLACK_BOT_TOKEN\"\nsigning_secret = \"env:TEST_SLACK_SIGNING_SECRET\"\n\
         api_url = \"http://127.0.0.1:{slack_port}/api\"\nchannel = \"C0ALL\"\nchannels = {{ dba = \"C0DBA\", finance = \"C0FIN\" }}\n{users}\n"
    )
}

/// The environment that table's `env:` references read.
pub const SLACK_ENV: [(&str, &str); 2] = [
    ("TEST_SLACK_BOT_TOKEN", TOKEN),
    ("TEST_SLACK_SIGNING_SECRET", SECRET),
];

pub fn text_of(version: &Value) -> String {
    version["blocks"].to_string()
}

pub fn has_buttons(version: &Value) -> bool {
    version["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["type"] == "actions")
}

//! Random operation sequences against a plain in-memory model of approvals, calls and grants:
//! the store must give the same results and never make an illegal transition.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use airlock_storage::{ApprovalStatus, Begin, CallOutcome, Principal, StoreOptions, Verdict};
use proptest::prelude::*;
use support::*;

#[derive(Debug, Clone)]
enum Op {
    Create {
        quorum: u32,
        grouped: bool,
        uses: u32,
    },
    Decide {
        approval: usize,
        who: usize,
        approve: bool,
    },
    Cancel {
        approval: usize,
        by_requester: bool,
    },
    Begin {
        approval: usize,
    },
    Complete {
        approval: usize,
    },
    Reuse {
        approval: usize,
    },
    Sweep,
    Wait {
        ms: u64,
    },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..4, any::<bool>(), 1u32..3).prop_map(|(quorum, grouped, uses)| Op::Create {
            quorum,
            grouped,
            uses
        }),
        (0usize..6, 0usize..6, prop::bool::weighted(0.8)).prop_map(|(approval, who, approve)| {
            Op::Decide {
                approval,
                who,
                approve,
            }
        }),
        (0usize..6, any::<bool>()).prop_map(|(approval, by_requester)| Op::Cancel {
            approval,
            by_requester
        }),
        (0usize..6).prop_map(|approval| Op::Begin { approval }),
        (0usize..6).prop_map(|approval| Op::Complete { approval }),
        (0usize..6).prop_map(|approval| Op::Reuse { approval }),
        Just(Op::Sweep),
        (0u64..6_000).prop_map(|ms| Op::Wait { ms }),
    ]
}

fn deciders() -> Vec<Principal> {
    vec![
        approver("alice", &["g"]), // the requester
        approver("bob", &["g"]),
        approver("carol", &["g"]),
        approver("dave", &["h"]),
        admin("root"),
        agent("bot"),
    ]
}

const TTL: u64 = 5000;
const GRANT_TTL: u64 = 8_000;

#[derive(Debug, Clone, PartialEq)]
enum CallState {
    Pending,
    Approved,
    Executing,
    Done,
    Declined,
    Expired,
    Cancelled,
}

#[derive(Debug, Clone)]
struct ModelApproval {
    /// When the approved call may no longer start.
    run_by: u64,
    id: String,
    call_id: String,
    fingerprint: String,
    grouped: bool,
    quorum: u32,
    uses: u32,
    expires_at: u64,
    status: ApprovalStatus,
    deciders: BTreeSet<String>,
    approvals: BTreeSet<String>,
    call: CallState,
}

#[derive(Default)]
struct Model {
    approvals: Vec<ModelApproval>,
    /// fingerprint → (uses left, expires_at)
    grants: BTreeMap<String, (u32, u64)>,
}

impl Model {
    fn decide(
        &mut self,
        i: usize,
        who: &Principal,
        approve: bool,
        now: u64,
    ) -> Result<ApprovalStatus, &'static str> {
        let a = &mut self.approvals[i];
        if who.id == "alice" {
            return Err("approval.self_approval");
        }
        // Where the approval names groups, only their members' approvals count: an admin
        // outside them may decline, not approve.
        let member = !a.grouped || who.groups.iter().any(|g| g == "g");
        let may = match who.role.as_str() {
            "admin" => member || !approve,
            "approver" => member,
            _ => false,
        };
        if !may {
            return Err("approval.forbidden");
        }
        if a.deciders.contains(&who.id) {
            return Err("approval.already_decided");
        }
        if a.status != ApprovalStatus::Pending || now >= a.expires_at {
            return Err("approval.not_pending");
        }
        a.deciders.insert(who.id.clone());
        if !approve {
            a.status = ApprovalStatus::Declined;
            a.call = CallState::Declined;
        } else {
            a.approvals.insert(who.id.clone());
            if a.approvals.len() as u32 >= a.quorum {
                a.status = ApprovalStatus::Approved;
                a.call = CallState::Approved;
                a.run_by = now + GRANT_TTL;
                if a.uses > 1 {
                    self.grants
                        .insert(a.fingerprint.clone(), (a.uses - 1, now + GRANT_TTL));
                }
            }
        }
        Ok(a.status)
    }

    fn spend(&mut self, fingerprint: &str, now: u64) -> bool {
        match self.grants.get_mut(fingerprint) {
            Some((uses, exp)) if *uses > 0 && now < *exp => {
                *uses -= 1;
                if *uses == 0 {
                    self.grants.remove(fingerprint);
                }
                true
            }
            _ => false,
        }
    }
}

fn code<T>(r: Result<T, airlock_storage::StoreError>) -> Result<T, &'static str> {
    r.map_err(|e| e.code())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_store_matches_the_model(ops in prop::collection::vec(arb_op(), 1..60)) {
        let place = Place::new();
        let store = place.open(StoreOptions::default()).unwrap();
        let mut model = Model::default();
        let people = deciders();
        let requester = people[0].clone();
        let mut now = 1_000u64;
        let mut calls = 0;
        for op in ops {
            now += 1;
            match op {
                Op::Create { quorum, grouped, uses } => {
                    let n = model.approvals.len();
                    let fp = format!("sha256:{n}");
                    let groups: &[&str] = if grouped { &["g"] } else { &[] };
                    let mut h = held(&format!("call-{n}"), &fp, &requester, groups, quorum, uses, now, TTL);
                    h.approval.grant.ttl_ms = GRANT_TTL;
                    let a = store.create_approval(h.call, h.approval, no_fields()).unwrap();
                    model.approvals.push(ModelApproval {
                        run_by: 0,
                        id: a.id, call_id: format!("call-{n}"), fingerprint: fp, grouped, quorum, uses,
                        expires_at: now + TTL, status: ApprovalStatus::Pending, deciders: BTreeSet::new(),
                        approvals: BTreeSet::new(), call: CallState::Pending,
                    });
                }
                Op::Decide { approval, who, approve } if approval < model.approvals.len() => {
                    let verdict = if approve { Verdict::Approve { reason: None, edit: None } } else { Verdict::Decline { reason: "no".into() } };
                    let got = code(store.decide(&model.approvals[approval].id, &people[who], verdict, now)).map(|a| a.status);
                    let want = model.decide(approval, &people[who], approve, now);
                    prop_assert_eq!(got, want);
                }
                Op::Cancel { approval, by_requester } if approval < model.approvals.len() => {
                    let by = if by_requester { requester.clone() } else { people[1].clone() };
                    let got = code(store.cancel(&model.approvals[approval].call_id, &by, now)).map(|_| ());
                    let a = &mut model.approvals[approval];
                    let want = if !by_requester {
                        Err("approval.forbidden")
                    } else if matches!(a.call, CallState::Pending | CallState::Approved) {
                        if a.status == ApprovalStatus::Pending {
                            a.status = ApprovalStatus::Cancelled;
                        } else {
                            model.grants.remove(&a.fingerprint);
                        }
                        a.call = CallState::Cancelled;
                        Ok(())
                    } else {
                        Err("call.invalid_state")
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Begin { approval } if approval < model.approvals.len() => {
                    let got = code(store.begin_execution(&model.approvals[approval].call_id, now)).map(|b| match b {
                        Begin::Run(_) => "run", Begin::InProgress(_) => "in_progress",
                        Begin::Pending(_) => "pending", Begin::Finished(_) => "finished",
                    });
                    let want = match model.approvals[approval].call {
                        CallState::Approved => {
                            if now < model.approvals[approval].run_by {
                                model.approvals[approval].call = CallState::Executing;
                                Ok("run")
                            } else {
                                Err("approval.expired")
                            }
                        }
                        CallState::Executing => Ok("in_progress"),
                        CallState::Pending => Ok("pending"),
                        _ => Ok("finished"),
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Complete { approval } if approval < model.approvals.len() => {
                    let outcome = CallOutcome { upstream_status: Some(200), result: None, error: None, message: None };
                    let got = code(store.complete_call(&model.approvals[approval].call_id, outcome, now)).map(|_| ());
                    let a = &mut model.approvals[approval];
                    let want = if a.call == CallState::Executing { a.call = CallState::Done; Ok(()) } else { Err("call.invalid_state") };
                    prop_assert_eq!(got, want);
                }
                Op::Reuse { approval } if approval < model.approvals.len() => {
                    calls += 1;
                    let fp = model.approvals[approval].fingerprint.clone();
                    let c = call(&format!("reuse-{calls}"), &fp, &requester, "require_approval", now);
                    let got = store.call_with_grant(c, "run:run-1", no_fields(), false).unwrap().is_some();
                    prop_assert_eq!(got, model.spend(&fp, now));
                }
                Op::Sweep => {
                    let expired: BTreeSet<String> = store.expire_due(now).unwrap().approvals.into_iter().map(|a| a.id).collect();
                    let mut want = BTreeSet::new();
                    for a in &mut model.approvals {
                        if a.status == ApprovalStatus::Pending && a.expires_at <= now {
                            a.status = ApprovalStatus::Expired;
                            a.call = CallState::Expired;
                            want.insert(a.id.clone());
                        }
                    }
                    model.grants.retain(|_, (_, exp)| *exp > now);
                    prop_assert_eq!(expired, want);
                }
                Op::Wait { ms } => now += ms,
                _ => {}
            }
            for a in &model.approvals {
                let stored = store.approval(&a.id).unwrap().unwrap();
                prop_assert_eq!(stored.status, a.status, "approval {}", a.id);
            }
            for (fp, (uses, _)) in &model.grants {
                let g = store.grant(fp, "run:run-1").unwrap();
                prop_assert_eq!(g.map(|g| g.uses_left), Some(*uses));
            }
        }
        prop_assert!(store.verify_audit().unwrap().is_ok());
    }
}

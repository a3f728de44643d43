//! Property tests of the message state machine: arbitrary sequences of send, receive,
//! settle and clock steps, applied through the core's transition functions to a tiny
//! in-memory queue, keep every invariant the broker promises.

// Simulation code of a test: an impossible state should panic the test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use redrive_core::machine::{self, MessageMeta, MessageState, Refusal, Step};
use redrive_core::policy::{Backoff, QueuePolicy};
use redrive_core::{DeadLetterReason, Timestamp};

#[derive(Debug, Clone)]
enum Op {
    Send { ttl_ms: Option<u64>, delay_ms: u64 },
    Receive { max: usize },
    ReceiveDeferred { msg: usize },
    Complete { token: usize },
    Abandon { token: usize, delay_ms: Option<u64> },
    Defer { token: usize },
    DeadLetter { token: usize },
    Renew { token: usize },
    Advance { ms: u64 },
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (proptest::option::of(1_000u64..120_000), prop_oneof![Just(0u64), 0u64..20_000])
            .prop_map(|(ttl_ms, delay_ms)| Op::Send { ttl_ms, delay_ms }),
        4 => (1usize..4).prop_map(|max| Op::Receive { max }),
        1 => (0usize..8).prop_map(|msg| Op::ReceiveDeferred { msg }),
        3 => (0usize..6).prop_map(|token| Op::Complete { token }),
        4 => (0usize..6, proptest::option::of(0u64..10_000))
            .prop_map(|(token, delay_ms)| Op::Abandon { token, delay_ms }),
        1 => (0usize..6).prop_map(|token| Op::Defer { token }),
        1 => (0usize..6).prop_map(|token| Op::DeadLetter { token }),
        1 => (0usize..6).prop_map(|token| Op::Renew { token }),
        3 => prop_oneof![1u64..5_000, 25_000u64..40_000].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Sweep),
    ]
}

/// Where a message ended up, if it left the queue.
#[derive(Debug, Clone, PartialEq)]
enum Gone {
    Completed,
    DeadLettered {
        reason: DeadLetterReason,
        count: u32,
    },
    Dropped,
}

struct Sim {
    policy: QueuePolicy,
    now: Timestamp,
    live: Vec<Option<MessageMeta>>,
    gone: Vec<Option<Gone>>,
    tokens: Vec<String>, // most recent first
    deliveries: Vec<Vec<(u32, Timestamp)>>,
    next_token: u64,
}

impl Sim {
    fn apply_step(&mut self, i: usize, step: Step) {
        let count = self.live[i].as_ref().map_or(0, |m| m.delivery_count);
        match step {
            Step::Keep(meta) => {
                let old = self.live[i].as_ref().unwrap().delivery_count;
                assert!(meta.delivery_count >= old, "delivery count decreased");
                check_shape(&meta);
                self.live[i] = Some(meta);
            }
            Step::Complete => {
                self.live[i] = None;
                self.gone[i] = Some(Gone::Completed);
            }
            Step::DeadLetter { reason, .. } => {
                if reason == DeadLetterReason::MaxDeliveryCountExceeded {
                    assert_eq!(
                        count, self.policy.max_delivery_count,
                        "dead-lettered for max delivery count at the wrong count"
                    );
                }
                self.live[i] = None;
                self.gone[i] = Some(Gone::DeadLettered { reason, count });
            }
            Step::Drop => {
                self.live[i] = None;
                self.gone[i] = Some(Gone::Dropped);
            }
        }
    }

    fn find_token(&self, k: usize) -> Option<(usize, String)> {
        let token = self.tokens.get(k)?.clone();
        let i = self
            .live
            .iter()
            .position(|m| m.as_ref().and_then(|m| m.lock_token.as_deref()) == Some(&token));
        Some((i.unwrap_or(usize::MAX), token))
    }

    fn deliver(&mut self, i: usize, by_seq: bool) {
        let meta = self.live[i].clone().unwrap();
        self.next_token += 1;
        let token = format!("t{}", self.next_token);
        let expired = meta.is_expired(self.now);
        match machine::receive(&meta, &self.policy, self.now, 30_000, token.clone(), by_seq) {
            Ok(Step::Keep(new)) => {
                assert!(!expired, "an expired message was delivered");
                assert!(
                    self.gone[i].is_none(),
                    "a settled message was delivered again"
                );
                assert_eq!(new.delivery_count, meta.delivery_count + 1);
                assert!(new.delivery_count <= self.policy.max_delivery_count);
                self.deliveries[i].push((new.delivery_count, self.now));
                self.tokens.insert(0, token);
                self.apply_step(i, Step::Keep(new));
            }
            Ok(other) => self.apply_step(i, other),
            Err(_) => {}
        }
    }

    fn settle(
        &mut self,
        k: usize,
        f: impl FnOnce(&MessageMeta, &str, Timestamp) -> Result<Step, Refusal>,
    ) {
        let Some((i, token)) = self.find_token(k) else {
            return;
        };
        if i == usize::MAX {
            // The token's message was settled or its lock released: the store finds no
            // message holding it, which is LockLost. Nothing changes.
            return;
        }
        let meta = self.live[i].clone().unwrap();
        let valid = meta.locked_until.unwrap() > self.now;
        match f(&meta, &token, self.now) {
            Ok(step) => {
                assert!(valid, "settled under an expired lock");
                self.apply_step(i, step);
            }
            Err(e) => {
                assert_eq!(e, Refusal::LockLost);
                assert!(!valid, "a valid lock was refused");
            }
        }
    }
}

fn check_shape(m: &MessageMeta) {
    match m.state {
        MessageState::Locked => assert!(m.lock_token.is_some() && m.locked_until.is_some()),
        MessageState::Available | MessageState::Deferred => {
            assert!(m.lock_token.is_none() && m.locked_until.is_none())
        }
    }
    if m.state == MessageState::Deferred {
        assert!(m.deferred);
    }
}

fn run(max_delivery: u32, dlq_on_expiry: bool, backoff_ms: u64, ops: Vec<Op>) {
    let policy = QueuePolicy {
        max_delivery_count: max_delivery,
        dead_letter_on_expiry: dlq_on_expiry,
        redelivery_backoff: if backoff_ms == 0 {
            Backoff::None
        } else {
            Backoff::Exponential {
                initial_ms: backoff_ms,
                max_ms: backoff_ms * 8,
                jitter: 0.5,
            }
        },
        ..QueuePolicy::default()
    };
    let mut sim = Sim {
        policy,
        now: Timestamp(1_800_000_000_000),
        live: vec![],
        gone: vec![],
        tokens: vec![],
        deliveries: vec![],
        next_token: 0,
    };
    for op in ops {
        match op {
            Op::Send { ttl_ms, delay_ms } => {
                let exp = ttl_ms.map(|t| sim.now.plus_millis(t as i64));
                sim.live.push(Some(MessageMeta::sent(
                    sim.now.plus_millis(delay_ms as i64),
                    exp,
                )));
                sim.gone.push(None);
                sim.deliveries.push(vec![]);
            }
            Op::Receive { max } => {
                let mut got = 0;
                for i in 0..sim.live.len() {
                    if got == max {
                        break;
                    }
                    if let Some(m) = &sim.live[i]
                        && m.state == MessageState::Available
                        && m.visible_at <= sim.now
                    {
                        sim.deliver(i, false);
                        got += 1;
                    }
                }
            }
            Op::ReceiveDeferred { msg } => {
                if msg < sim.live.len() && sim.live[msg].is_some() {
                    sim.deliver(msg, true);
                }
            }
            Op::Complete { token } => sim.settle(token, machine::complete),
            Op::Abandon { token, delay_ms } => {
                let policy = sim.policy.clone();
                sim.settle(token, |m, t, now| {
                    machine::abandon(m, &policy, t, now, delay_ms, 7)
                })
            }
            Op::Defer { token } => sim.settle(token, machine::defer),
            Op::DeadLetter { token } => {
                sim.settle(token, |m, t, now| machine::dead_letter(m, t, now, "Poison"))
            }
            Op::Renew { token } => sim.settle(token, |m, t, now| machine::renew(m, t, now, 30_000)),
            Op::Advance { ms } => sim.now = sim.now.plus_millis(ms as i64),
            Op::Sweep => {
                for i in 0..sim.live.len() {
                    if let Some(m) = sim.live[i].clone()
                        && let Some(step) = machine::sweep(&m, &sim.policy, sim.now, i as u64)
                    {
                        sim.apply_step(i, step);
                    }
                }
            }
        }
        // Exactly one place per message: live xor gone.
        for i in 0..sim.live.len() {
            assert!(
                sim.live[i].is_some() != sim.gone[i].is_some(),
                "message {i} in two places or none"
            );
        }
    }
    for (i, d) in sim.deliveries.iter().enumerate() {
        let counts: Vec<u32> = d.iter().map(|(c, _)| *c).collect();
        let expect: Vec<u32> = (1..=counts.len() as u32).collect();
        assert_eq!(
            counts, expect,
            "message {i}: deliveries must count 1, 2, 3, ..."
        );
        if let Some(Gone::DeadLettered {
            reason: DeadLetterReason::MaxDeliveryCountExceeded,
            count,
        }) = &sim.gone[i]
        {
            assert_eq!(
                *count as usize,
                d.len(),
                "dead-lettered at max after exactly max deliveries"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_sequence_of_operations_keeps_the_invariants(
        max_delivery in 1u32..5,
        dlq_on_expiry in any::<bool>(),
        backoff_ms in prop_oneof![Just(0u64), 100u64..5_000],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(max_delivery, dlq_on_expiry, backoff_ms, ops);
    }
}

#[test]
fn max_three_means_three_deliveries_then_dead_letter() {
    let policy = QueuePolicy {
        max_delivery_count: 3,
        ..QueuePolicy::default()
    };
    let now = Timestamp(0);
    let mut meta = MessageMeta::sent(now, None);
    for n in 1..=3 {
        let Step::Keep(locked) =
            machine::receive(&meta, &policy, now, 1_000, format!("t{n}"), false).unwrap()
        else {
            panic!("delivery {n} refused")
        };
        assert_eq!(locked.delivery_count, n);
        match machine::abandon(&locked, &policy, &format!("t{n}"), now, None, 0).unwrap() {
            Step::Keep(m) if n < 3 => meta = m,
            Step::DeadLetter { reason, by_broker } if n == 3 => {
                assert_eq!(reason, DeadLetterReason::MaxDeliveryCountExceeded);
                assert!(by_broker);
                return;
            }
            other => panic!("unexpected step after delivery {n}: {other:?}"),
        }
    }
    panic!("never dead-lettered");
}

#[test]
fn a_view_shows_a_lock_that_ran_out_as_its_release_leaves_it() {
    let policy = QueuePolicy {
        max_delivery_count: 3,
        ..QueuePolicy::default()
    };
    let sent = MessageMeta::sent(Timestamp(0), None);
    let Step::Keep(locked) =
        machine::receive(&sent, &policy, Timestamp(0), 1_000, "t".into(), false).unwrap()
    else {
        panic!("delivery refused")
    };
    // While the lock holds, the view is the stored meta.
    assert_eq!(machine::view(&locked, &policy, Timestamp(999), 0), locked);
    // From its expiry on, the lock holds nothing, and a settlement is refused.
    let seen = machine::view(&locked, &policy, Timestamp(1_000), 0);
    assert_eq!(seen.state, MessageState::Available);
    assert_eq!((seen.lock_token, seen.locked_until), (None, None));
    assert_eq!(seen.visible_at, Timestamp(1_000));
    assert_eq!(seen.delivery_count, 1);
    assert_eq!(
        machine::complete(&locked, "t", Timestamp(1_000)),
        Err(Refusal::LockLost)
    );
    // With a backoff, the view is the sweep's: visible after the backoff from the expiry.
    let backoff = QueuePolicy {
        redelivery_backoff: Backoff::Fixed { delay_ms: 500 },
        ..policy.clone()
    };
    let seen = machine::view(&locked, &backoff, Timestamp(1_200), 0);
    assert_eq!(
        (seen.state, seen.visible_at),
        (MessageState::Available, Timestamp(1_500))
    );
    let Some(Step::Keep(swept)) = machine::sweep(&locked, &backoff, Timestamp(1_200), 0) else {
        panic!("the sweep releases the lock")
    };
    assert_eq!(seen, swept);
    // A deferred message's lock returns it to deferred.
    let deferred = MessageMeta {
        deferred: true,
        ..locked.clone()
    };
    assert_eq!(
        machine::view(&deferred, &policy, Timestamp(2_000), 0).state,
        MessageState::Deferred
    );
    // At its last delivery the release dead-letters it: shown unlocked until that is written.
    let last = MessageMeta {
        delivery_count: 3,
        ..locked
    };
    let seen = machine::view(&last, &policy, Timestamp(5_000), 0);
    assert_eq!(
        (seen.state, seen.visible_at, seen.locked_until),
        (MessageState::Available, Timestamp(1_000), None)
    );
}

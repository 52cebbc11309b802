//! The `ordering` scenario: what an ordering key costs. At `--rate` per second for
//! `--seconds`, registrations alternate between unordered ones and ordered ones spread
//! over `KEYS` keys, so that a key seldom has two pending at once: each kind's latency
//! from registration to arrival, side by side in one run, and what the key adds. Then
//! `ONE_KEY` notifications on a single key, registered behind a first one that is due a
//! little later: how long each waits for the one before it (the key's step), and how many
//! arrived out of turn (must be 0).

use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde_json::{json, Value};

use crate::producer::Producer;
use crate::receiver::Receiver;
use crate::report::{percentile, Results};
use crate::scenarios::{self, ms_between, payment, wait_all, Rig};
use crate::Opts;

/// Keys the paced ordered registrations are spread over.
const KEYS: usize = 50;
/// Notifications on the single key.
const ONE_KEY: usize = 500;
/// How long the single key's first notification waits, so that the rest are registered
/// behind it before it goes.
const HEAD_DELAY: Duration = Duration::from_secs(2);

pub async fn ordering(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let rig = Rig::start(opts).await?;
    let (_, receiver, addr, _, producer) = rig.parts();
    let url = format!("http://{addr}/ok");

    // Warm up connections and caches, then measure.
    paced(producer, receiver, &url, opts).await?;
    let (ordered, unordered) = paced(producer, receiver, &url, opts).await?;
    for p in [50.0, 99.0] {
        let (o, u) = (percentile(&ordered, p), percentile(&unordered, p));
        r.add("ordering", run, &format!("ordered_p{p}"), o, "ms");
        r.add("ordering", run, &format!("unordered_p{p}"), u, "ms");
        r.add("ordering", run, &format!("added_p{p}"), o - u, "ms");
    }

    receiver.reset();
    let (step, out_of_turn) = one_key(producer, receiver, &url).await?;
    r.add("ordering", run, "one_key_step", step, "ms");
    r.add(
        "ordering",
        run,
        "one_key_out_of_turn",
        out_of_turn as f64,
        "notifications",
    );
    Ok(())
}

/// Registers at `opts.rate` per second for `opts.seconds`, every other one with an
/// ordering key; waits for all, and returns the latencies (ms) of the ordered ones and
/// of the unordered ones.
async fn paced(
    producer: &Producer,
    receiver: &Receiver,
    url: &str,
    opts: &Opts,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let body = |i: usize| {
        let mut body = json!({"url": url, "body": payment(i)});
        if i.is_multiple_of(2) {
            body["ordering_key"] = json!(format!("order-{}", i / 2 % KEYS));
        }
        body
    };
    let registered = scenarios::paced(producer, receiver, opts, body).await?;
    let all = scenarios::latencies(receiver, &registered)?;
    let ordered = all.iter().step_by(2).copied().collect();
    let unordered = all.iter().skip(1).step_by(2).copied().collect();
    Ok((ordered, unordered))
}

/// `ONE_KEY` notifications on one key, registered one after another behind a first one
/// due `HEAD_DELAY` later: the mean time (ms) between one's arrival and the next's, and
/// how many arrived out of registration order.
async fn one_key(
    producer: &Producer,
    receiver: &Receiver,
    url: &str,
) -> anyhow::Result<(f64, usize)> {
    let body = |i: usize, delay: Duration| -> Value {
        json!({"url": url, "body": payment(i), "ordering_key": "one",
            "delay": format!("{}ms", delay.as_millis())})
    };
    let mut registered = vec![producer.register(&body(0, HEAD_DELAY)).await?];
    for i in 1..ONE_KEY {
        registered.push(producer.register(&body(i, Duration::ZERO)).await?);
    }
    wait_all(receiver, &registered).await?;
    let log = receiver.snapshot();
    let arrivals: Vec<SystemTime> = registered
        .iter()
        .map(|x| {
            log.get(&x.id)
                .and_then(|d| d.delivered_at())
                .context("delivered")
        })
        .collect::<anyhow::Result<_>>()?;
    let out_of_turn = arrivals.windows(2).filter(|w| w[1] < w[0]).count();
    let span = ms_between(arrivals[0], arrivals[ONE_KEY - 1]);
    Ok((span / (ONE_KEY - 1) as f64, out_of_turn))
}

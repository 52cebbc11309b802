//! The `quota` scenario: one merchant's backlog, all due at once, under its quota
//! (`--quota`, default postback's own `1000/s`), delivered by one instance and then by
//! three sharing the store. It reports the rate reached over the quota, the busiest
//! second over the quota (a window starting at each arrival), Redis commands per
//! delivery, and deferrals per notification.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::processes::Postback;
use crate::producer::Producer;
use crate::receiver::Receiver;
use crate::report::Results;
use crate::scenarios::{payment, wait_all, Meter};
use crate::Opts;

pub async fn quota(opts: &Opts, r: &mut Results, run: usize) -> anyhow::Result<()> {
    let quota: postback::delivery::policy::Quota =
        opts.quota.parse().map_err(anyhow::Error::msg)?;
    let per_second = match quota.interval_us() {
        0 => anyhow::bail!("--quota: the quota scenario needs a limited quota"),
        interval => 1e6 / interval as f64,
    };
    for instances in [1, 3] {
        let scenario = format!("quota_{instances}_instances");
        one(opts, instances, per_second, r, &scenario, run).await?;
    }
    Ok(())
}

async fn one(
    opts: &Opts,
    instances: usize,
    per_second: f64,
    r: &mut Results,
    scenario: &str,
    run: usize,
) -> anyhow::Result<()> {
    let store = opts.store()?;
    let receiver = Receiver::default();
    let addr = receiver.listen("127.0.0.1").await?;
    let mut env = opts.postback_env();
    env.push(("POSTBACK_DELIVERY_RATE_LIMIT".into(), opts.quota.clone()));
    let mut pbs = Vec::new();
    for _ in 0..instances {
        pbs.push(Postback::start(&store, &env).await?);
    }
    let urls: Vec<&str> = pbs.iter().map(|pb| pb.url.as_str()).collect();
    let producer = Producer::new(&urls)?;
    let n = opts.n.min(5_000);
    let bodies = (0..n)
        .map(|i| json!({"url": format!("http://{addr}/merchant"), "body": payment(i), "delay": "4s"}))
        .collect();
    let (registered, took) = producer.register_all(bodies, opts.producers).await?;
    anyhow::ensure!(
        took < Duration::from_secs(4),
        "registration outlasted the delay"
    );
    let meter = Meter::start(&store, &pbs)?;
    wait_all(&receiver, &registered).await?;
    let mut arrivals: Vec<SystemTime> = receiver
        .snapshot()
        .values()
        .flat_map(|d| d.arrivals.iter().map(|(at, _)| *at))
        .collect();
    arrivals.sort();
    let span = arrivals[arrivals.len() - 1].duration_since(arrivals[0])?;
    let achieved = (arrivals.len() - 1) as f64 / span.as_secs_f64();
    r.add(
        scenario,
        run,
        "achieved_over_quota",
        achieved / per_second,
        "x",
    );
    let busiest = busiest_second(&arrivals) as f64;
    r.add(
        scenario,
        run,
        "busiest_second_over_quota",
        busiest / per_second,
        "x",
    );
    let deferrals = deferrals(&pbs).await?;
    r.add(
        scenario,
        run,
        "deferrals_per_notification",
        deferrals / n as f64,
        "",
    );
    meter.report(r, scenario, run, n)
}

/// The most arrivals within one second of any arrival.
fn busiest_second(sorted: &[SystemTime]) -> usize {
    let mut end = 0;
    let mut most = 0;
    for (start, first) in sorted.iter().enumerate() {
        while end < sorted.len()
            && sorted[end].duration_since(*first).unwrap_or_default() < Duration::from_secs(1)
        {
            end += 1;
        }
        most = most.max(end - start);
    }
    most
}

/// Deferrals of every reason, summed over the instances' `/metrics`.
async fn deferrals(pbs: &[Postback]) -> anyhow::Result<f64> {
    let client = reqwest::Client::new();
    let mut total = 0.0;
    for pb in pbs {
        let text = client
            .get(format!("{}/metrics", pb.url))
            .send()
            .await?
            .text()
            .await?;
        total += text
            .lines()
            .filter(|l| l.starts_with("postback_deferrals_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(total)
}

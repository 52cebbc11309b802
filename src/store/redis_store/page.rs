//! Paging over a sorted set whose score is a time, by `Cursor`, newest first or soonest
//! first, and the merge of one page per shard into one page over all shards.

use std::cmp::Reverse;

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::store::{Cursor, JobView};

/// One shard's answer to a page request.
#[derive(Debug, Default)]
pub struct ShardPage {
    /// Matches, in the list's order, with their positions.
    pub items: Vec<(Cursor, JobView)>,
    /// Where the scan stopped when the shard has more after it; `None` when exhausted.
    pub scanned_to: Option<Cursor>,
    /// How many notifications it read.
    pub examined: usize,
}

/// The order of a list: soonest first (ascending times) or newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    SoonestFirst,
    NewestFirst,
}

impl Order {
    /// Whether the position `(at, id)` comes after `c` in this order.
    fn after(self, at: i64, id: &str, c: &Cursor, cid: &str) -> bool {
        match self {
            Order::SoonestFirst => at > c.at || (at == c.at && id > cid),
            Order::NewestFirst => at < c.at || (at == c.at && id < cid),
        }
    }
}

/// Merges one page per shard into the first `limit` items over all shards, in `order`.
/// A shard that stopped early has not looked past its `scanned_to`, so nothing beyond
/// the earliest such position (in the order) is returned yet; the cursor then resumes
/// from there. Also how many notifications the shards read.
pub fn merge(
    pages: Vec<ShardPage>,
    limit: usize,
    order: Order,
) -> (Vec<JobView>, Option<Cursor>, usize) {
    let examined = pages.iter().map(|p| p.examined).sum();
    let key = |c: &Cursor| (c.at, c.id.to_string());
    let stops = pages.iter().filter_map(|p| p.scanned_to.as_ref());
    let frontier = match order {
        Order::SoonestFirst => stops.min_by_key(|c| key(c)),
        Order::NewestFirst => stops.max_by_key(|c| key(c)),
    }
    .cloned();
    let within = |c: &Cursor| match (&frontier, order) {
        (None, _) => true,
        (Some(f), Order::SoonestFirst) => key(c) <= key(f),
        (Some(f), Order::NewestFirst) => key(c) >= key(f),
    };
    let mut items: Vec<(Cursor, JobView)> = pages
        .into_iter()
        .flat_map(|p| p.items)
        .filter(|(c, _)| within(c))
        .collect();
    match order {
        Order::SoonestFirst => items.sort_by_key(|(c, _)| key(c)),
        Order::NewestFirst => items.sort_by_key(|(c, _)| Reverse(key(c))),
    }
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|(c, _)| c.clone())
    } else {
        frontier
    };
    let items = items.into_iter().map(|(_, v)| v).collect();
    (items, next_cursor, examined)
}

/// Up to `limit` (member, score) pairs after `after` in `order`, with scores in
/// `[since, until]`, and whether more follow.
pub async fn scan<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    order: Order,
    limit: usize,
    after: Option<&Cursor>,
    (since, until): (Option<i64>, Option<i64>),
) -> RedisResult<(Vec<(String, i64)>, bool)> {
    let (low, high) = match order {
        Order::SoonestFirst => (max_of(after.map(|c| c.at), since), until),
        Order::NewestFirst => (since, min_of(after.map(|c| c.at), until)),
    };
    let low = low.map_or("-inf".to_string(), |t| t.to_string());
    let high = high.map_or("+inf".to_string(), |t| t.to_string());
    let (command, first, second) = match order {
        Order::SoonestFirst => ("ZRANGEBYSCORE", &low, &high),
        Order::NewestFirst => ("ZREVRANGEBYSCORE", &high, &low),
    };
    let after_id = after.map(|c| c.id.to_string());
    let mut window = limit + 1 + 16;
    loop {
        let raw: Vec<(String, i64)> = redis::cmd(command)
            .arg(key)
            .arg(first)
            .arg(second)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(window)
            .query_async(conn)
            .await?;
        let exhausted = raw.len() < window;
        let mut items: Vec<(String, i64)> = raw
            .into_iter()
            .filter(|(id, at)| match (after, &after_id) {
                (Some(c), Some(cid)) => order.after(*at, id, c, cid),
                _ => true,
            })
            .collect();
        if items.len() > limit || exhausted {
            let more = items.len() > limit;
            items.truncate(limit);
            return Ok((items, more));
        }
        window *= 2;
    }
}

fn max_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

//! Newest-first paging over a sorted set whose score is a time, by `Cursor`, and the
//! merge of one page per shard into one page over all shards.

use std::cmp::Reverse;

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::store::{Cursor, DeadPage, JobView};

/// One shard's answer to a page request.
#[derive(Debug, Default)]
pub struct ShardPage {
    /// Matches, newest first, with their positions.
    pub items: Vec<(Cursor, JobView)>,
    /// Where the scan stopped when the shard has more after it; `None` when exhausted.
    pub scanned_to: Option<Cursor>,
}

/// Merges one page per shard into the newest `limit` items over all shards. A shard that
/// stopped early has not looked past its `scanned_to`, so nothing older than the newest
/// such position is returned yet; the cursor then resumes from there.
pub fn merge(pages: Vec<ShardPage>, limit: usize) -> DeadPage {
    let key = |c: &Cursor| (c.at, c.id.to_string());
    let frontier = pages
        .iter()
        .filter_map(|p| p.scanned_to.as_ref())
        .max_by_key(|c| key(c))
        .cloned();
    let mut items: Vec<(Cursor, JobView)> = pages
        .into_iter()
        .flat_map(|p| p.items)
        .filter(|(c, _)| frontier.as_ref().is_none_or(|f| key(c) >= key(f)))
        .collect();
    items.sort_by_key(|(c, _)| Reverse(key(c)));
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|(c, _)| c.clone())
    } else {
        frontier
    };
    DeadPage {
        items: items.into_iter().map(|(_, v)| v).collect(),
        next_cursor,
    }
}

/// Up to `limit` (member, score) pairs after `after` with scores in `[since, until]`,
/// and whether more follow.
pub async fn newest_first<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    limit: usize,
    after: Option<&Cursor>,
    (since, until): (Option<i64>, Option<i64>),
) -> RedisResult<(Vec<(String, i64)>, bool)> {
    let top = match (after.map(|c| c.at), until) {
        (Some(a), Some(u)) => Some(a.min(u)),
        (a, u) => a.or(u),
    };
    let max = top.map_or("+inf".to_string(), |t| t.to_string());
    let min = since.map_or("-inf".to_string(), |s| s.to_string());
    let after_id = after.map(|c| c.id.to_string());
    let mut window = limit + 1 + 16;
    loop {
        let raw: Vec<(String, i64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(key)
            .arg(&max)
            .arg(&min)
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
                (Some(c), Some(cid)) => *at < c.at || id < cid,
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

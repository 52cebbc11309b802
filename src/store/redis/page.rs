//! Newest-first paging over a sorted set whose score is a time, by `Cursor`.

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::store::Cursor;

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

//! Newest-first paging over a sorted set whose score is a time, by `Cursor`.

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::store::Cursor;

/// Up to `limit` (member, score) pairs after `after`, and whether more follow.
pub async fn newest_first<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    limit: usize,
    after: Option<&Cursor>,
) -> RedisResult<(Vec<(String, i64)>, bool)> {
    let max = after.map_or("+inf".to_string(), |c| c.at.to_string());
    let after_id = after.map(|c| c.id.to_string());
    let mut window = limit + 1 + 16;
    loop {
        let raw: Vec<(String, i64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(key)
            .arg(&max)
            .arg("-inf")
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

//! One transition's transaction on Postgres: the database's time read once at its start,
//! each notification's row read `FOR UPDATE` before it is changed, and every write that
//! goes with a move between indexes (ordering keys' order, the wake-up of schedulers)
//! made here, as the embedded store's `Tables` does for its file.

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::lifecycle::{transitions, Index, Now, Record};

/// The advisory lock claims hold exclusively and wake-up checks shared.
const WAKE_CHECK_LOCK: i64 = 0x706f_7374_6261_636c; // "postbacl"

/// What a step on Postgres gives: any error rolls its transaction back.
pub type PgResult<T> = Result<T, Fault>;

/// Why a transaction failed.
#[derive(Debug)]
pub enum Fault {
    Db(tokio_postgres::Error),
    /// A row this version cannot read.
    Corrupt(String),
    /// No connection could be had from the pool.
    Pool(String),
}

impl From<tokio_postgres::Error> for Fault {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Db(e)
    }
}

impl From<deadpool_postgres::PoolError> for Fault {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Self::Db(e),
            e => Self::Pool(e.to_string()),
        }
    }
}

impl Fault {
    /// A deadlock or a serialization failure: the transaction may simply be run again.
    pub fn is_conflict(&self) -> bool {
        let Self::Db(e) = self else { return false };
        e.code().is_some_and(|c| c.code().starts_with("40"))
    }
}

/// Data this version cannot read.
pub fn corrupt(what: impl std::fmt::Display) -> Fault {
    Fault::Corrupt(format!("unreadable row: {what}"))
}

/// The database's clock, which every change and every walk of a list reads.
macro_rules! read_now {
    () => {
        "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8 AS now_us"
    };
}
const NOW: &str = read_now!();

/// The clock read at the start of a transaction whose commit may return before its WAL
/// is on disk (`Commit::Relaxed`), which it sets in the same statement: one round trip.
const NOW_RELAXED: &str = concat!(
    read_now!(),
    ", set_config('synchronous_commit', 'off', true)"
);

/// The database's clock now, which every change and every walk of a list reads.
pub async fn database_now(c: &impl GenericClient) -> PgResult<Now> {
    read_clock(c, NOW).await
}

async fn read_clock(c: &impl GenericClient, sql: &str) -> PgResult<Now> {
    let statement = c.prepare_cached(sql).await?;
    let row = c.query_one(&statement, &[]).await?;
    Ok(Now::from_micros(col(&row, "now_us")?))
}

/// How a transaction's commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Answered once its WAL is on disk: a registration, a replay, a cancel, a discard.
    Durable,
    /// Answered before its WAL is on disk. For the pipeline's own transitions (claims,
    /// settles, hand-backs, retention, taking in what producers committed): a crash of
    /// the database that loses one makes its notification be attempted again (the same
    /// `webhook-id`), never lost.
    Relaxed,
}

/// Column `name` of `row`: one missing or of another type (a schema that drifted from
/// these statements) is an error naming it, never a panic.
pub fn col<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> PgResult<T> {
    row.try_get(name)
        .map_err(|e| corrupt(format!("column {name}: {e}")))
}

/// A row of `postback.jobs` as a transition reads it.
pub struct JobRow {
    pub record: Record,
    pub ordering: Option<String>,
}

/// An open transaction, with the database's time at its start.
pub struct Tx<'c> {
    pub sql: Transaction<'c>,
    pub now: Now,
    /// A notification became due earlier than any before it, or an ordering key's next
    /// one took its turn: schedulers should wake (`postback_due` is sent at commit).
    pub wake: bool,
    /// Claims are held off already (`heads_due`), until this transaction ends.
    holds_claims: bool,
}

impl<'c> Tx<'c> {
    /// Starts a transaction on `sql` whose commit is made durable as `commit` says,
    /// reading the database's clock.
    pub async fn begin(sql: Transaction<'c>, commit: Commit) -> PgResult<Self> {
        let clock = match commit {
            Commit::Durable => NOW,
            Commit::Relaxed => NOW_RELAXED,
        };
        Ok(Self {
            now: read_clock(&sql, clock).await?,
            sql,
            wake: false,
            holds_claims: false,
        })
    }

    /// Tells every instance's scheduler (this one's too) when this commits, if it should
    /// wake; then commits.
    pub async fn commit(self) -> PgResult<()> {
        if self.wake {
            self.sql
                .execute("SELECT pg_notify('postback_due', '')", &[])
                .await?;
        }
        self.sql.commit().await?;
        Ok(())
    }

    pub async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
        let statement = self.sql.prepare_cached(sql).await?;
        Ok(self.sql.query(&statement, params).await?)
    }

    pub async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64> {
        let statement = self.sql.prepare_cached(sql).await?;
        Ok(self.sql.execute(&statement, params).await?)
    }

    /// The row of `id`, locked until the transaction ends.
    pub async fn job(&self, id: &str) -> PgResult<Option<JobRow>> {
        let rows = self
            .query(
                "SELECT record, ordering FROM postback.jobs WHERE id = $1 FOR UPDATE",
                &[&id],
            )
            .await?;
        rows.first().map(job_row).transpose()
    }

    /// Writes `new` over `old` (`None` for a row just inserted), keeping the order of
    /// its ordering key, if any: registered or sent again, it joins the back of its key
    /// (and waits behind any other); finished, it leaves, and the next of its key takes
    /// its turn. The record as saved.
    pub async fn save(
        &mut self,
        id: &str,
        ordering: Option<&str>,
        old: Option<&Record>,
        new: &Record,
    ) -> PgResult<Record> {
        let new = match ordering {
            Some(key) => self.keep_order(id, key, old, new).await?,
            None => new.clone(),
        };
        self.write(id, &new).await?;
        Ok(new)
    }

    /// Writes the record and its place in the indexes.
    pub async fn write(&self, id: &str, r: &Record) -> PgResult<()> {
        let (idx, at) = place(r);
        self.execute(
            "UPDATE postback.jobs SET record = $2, idx = $3, at = $4 WHERE id = $1",
            &[&id, &r.encode(), &idx, &at],
        )
        .await?;
        Ok(())
    }

    async fn keep_order(
        &mut self,
        id: &str,
        key: &str,
        old: Option<&Record>,
        new: &Record,
    ) -> PgResult<Record> {
        let index = |r: Option<&Record>| r.and_then(Record::position).map(|(index, _)| index);
        let (from, to) = (index(old), index(Some(new)));
        let (joins, leaves) = (Index::joins_order(from, to), Index::leaves_order(from, to));
        if leaves {
            self.leave_order(key, id).await?;
        } else if joins && self.join_order(key, id).await? {
            return Ok(transitions::wait(new).unwrap_or_else(|| new.clone()));
        }
        Ok(new.clone())
    }

    /// Serializes the changes to one ordering key's order.
    async fn lock_order(&self, key: &str) -> PgResult<()> {
        self.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('order ' || $1, 0))",
            &[&key],
        )
        .await?;
        Ok(())
    }

    /// Puts `id` at the back of ordering key `key`. Whether another is before it.
    async fn join_order(&self, key: &str, id: &str) -> PgResult<bool> {
        self.lock_order(key).await?;
        let rows = self
            .query(
                "SELECT max(place) AS last FROM postback.orders WHERE key = $1",
                &[&key],
            )
            .await?;
        let last: Option<i64> = rows.first().map(|r| col(r, "last")).transpose()?.flatten();
        let place = last.map_or(0, |at| at + 1);
        self.execute(
            "INSERT INTO postback.orders (key, place, id) VALUES ($1, $2, $3)",
            &[&key, &place, &id],
        )
        .await?;
        Ok(last.is_some())
    }

    /// Takes `id` out of ordering key `key`; when it was first, the next one takes its
    /// turn.
    async fn leave_order(&mut self, key: &str, id: &str) -> PgResult<()> {
        self.lock_order(key).await?;
        let rows = self
            .query(
                "SELECT place, id FROM postback.orders WHERE key = $1 ORDER BY place",
                &[&key],
            )
            .await?;
        let ids: Vec<(i64, String)> = rows
            .iter()
            .map(|r| Ok((col(r, "place")?, col(r, "id")?)))
            .collect::<PgResult<_>>()?;
        let Some(at) = ids.iter().position(|(_, each)| each == id) else {
            return Ok(());
        };
        self.execute(
            "DELETE FROM postback.orders WHERE key = $1 AND place = $2",
            &[&key, &ids[at].0],
        )
        .await?;
        let Some((_, next)) = ids.get(1).filter(|_| at == 0) else {
            return Ok(());
        };
        let Some(row) = self.job(next).await? else {
            return Ok(());
        };
        if let Some(new) = transitions::take_turn(&row.record, self.now) {
            self.write(next, &new).await?;
            self.wake = true;
        }
        Ok(())
    }

    /// Holds off, until this transaction ends, every transaction that asks whether what
    /// it scheduled heads the due index (`heads_due`): a claim takes this first. Without
    /// it, a registration could find an earlier notification still due that a claim
    /// running at the same time was taking, and not wake the scheduler, while that claim
    /// did not see the registration yet: it would wait for the scheduler's next idle
    /// wake-up. With it, either the claim sees what was scheduled, or the check sees the
    /// claim's outcome.
    pub async fn exclude_wake_checks(&self) -> PgResult<()> {
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&WAKE_CHECK_LOCK])
            .await?;
        Ok(())
    }

    /// Whether `id`, scheduled at `at`, heads the due index; then schedulers wake. Holds
    /// claims off until this transaction ends (`exclude_wake_checks`).
    pub async fn heads_due(&mut self, id: &str, r: &Record) -> PgResult<bool> {
        let Some(at) = r.due_at() else {
            return Ok(false);
        };
        if !self.holds_claims {
            self.execute(
                "SELECT pg_advisory_xact_lock_shared($1)",
                &[&WAKE_CHECK_LOCK],
            )
            .await?;
            self.holds_claims = true;
        }
        let rows = self
            .query(
                "SELECT 1 FROM postback.jobs WHERE idx = 'due' AND (at, id) < ($1, $2) LIMIT 1",
                &[&at, &id],
            )
            .await?;
        let heads = rows.is_empty();
        self.wake |= heads;
        Ok(heads)
    }

    /// Counts notifications of `tenant` that retention deleted for `reason`.
    pub async fn count_trimmed(&self, tenant: &str, reason: &str, n: i64) -> PgResult<()> {
        self.execute(
            "INSERT INTO postback.trimmed (tenant, reason, n) VALUES ($1, $2, $3)
             ON CONFLICT (tenant, reason) DO UPDATE SET n = postback.trimmed.n + $3",
            &[&tenant, &reason, &n],
        )
        .await?;
        Ok(())
    }
}

/// The index a record is in and its time there, as stored in `idx` and `at`.
pub fn place(r: &Record) -> (Option<&'static str>, Option<i64>) {
    match r.position() {
        Some((index, at)) => (Some(index.name()), Some(at)),
        None => (None, None),
    }
}

fn job_row(row: &Row) -> PgResult<JobRow> {
    let raw: &str = col(row, "record")?;
    Ok(JobRow {
        record: Record::decode(raw).map_err(corrupt)?,
        ordering: col(row, "ordering")?,
    })
}

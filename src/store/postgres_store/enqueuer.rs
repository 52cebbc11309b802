//! Registrations gathered into groups: concurrent `enqueue` calls (the API's requests)
//! wait a moment in a queue, and the registrations waiting when a writer is free are
//! stored together in one transaction (`changes::enqueue_group`), so that they share
//! its statements and its commit. A few writers run at once. A group that fails for a
//! reason other than an outage is stored again one registration at a time, so that
//! only the registration at fault fails.

use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::changes::{self, NewJob};
use super::tx::{PgResult, Tx};
use super::{store_error, CONFLICT_RETRIES};
use crate::store::{Enqueued, StoreError, StoreResult};

/// Most registrations in one transaction.
const MAX_GROUP: usize = 256;
/// Transactions of registrations at once.
const WRITERS: usize = 4;

struct Pending {
    job: NewJob,
    reply: oneshot::Sender<StoreResult<Enqueued>>,
}

pub struct Enqueuer {
    queue: mpsc::Sender<Pending>,
}

/// What the writers store with: the pool (`in_transaction!` reads `.pool`).
struct Writer {
    pool: Pool,
}

impl Enqueuer {
    pub fn start(pool: Pool) -> Self {
        let (queue, waiting) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(gather(Arc::new(Writer { pool }), waiting));
        Self { queue }
    }

    /// Stores `job` with whatever else is waiting; its answer once committed.
    pub async fn enqueue(&self, job: NewJob) -> StoreResult<Enqueued> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("postgres: the registration writer stopped".into());
        self.queue
            .send(Pending { job, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Takes what is waiting, up to `MAX_GROUP`, whenever a writer is free.
async fn gather(writer: Arc<Writer>, mut waiting: mpsc::Receiver<Pending>) {
    let free = Arc::new(Semaphore::new(WRITERS));
    while let Some(first) = waiting.recv().await {
        let Ok(permit) = free.clone().acquire_owned().await else {
            return;
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let writer = writer.clone();
        tokio::spawn(async move {
            store(&writer, group).await;
            drop(permit);
        });
    }
}

/// Stores a group and answers each of its registrations.
async fn store(writer: &Writer, group: Vec<Pending>) {
    let (jobs, replies): (Vec<NewJob>, Vec<_>) =
        group.into_iter().map(|p| (p.job, p.reply)).unzip();
    match write(writer, &jobs).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(e) if e.is_bug() && jobs.len() > 1 => {
            for (reply, job) in replies.into_iter().zip(&jobs) {
                let one = write(writer, std::slice::from_ref(job)).await;
                let _ = reply.send(one.map(|mut answers| answers.remove(0)));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

async fn write(writer: &Writer, jobs: &[NewJob]) -> StoreResult<Vec<Enqueued>> {
    in_transaction!(writer, |t| changes::enqueue_group(&mut t, jobs).await?)
}

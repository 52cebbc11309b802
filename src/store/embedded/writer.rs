//! Group commit for the embedded store: every transition is a step handed to one writer
//! thread, which applies the steps waiting at that moment in one write transaction,
//! commits it to disk (fsync), and only then answers each caller. Concurrent callers
//! share one fsync; each step stays atomic, since a transaction that fails answers every
//! step in it with the error and keeps none of them. In a simulation (`Writer::inline`)
//! each step is its own transaction, committed on the caller's thread, so that what
//! happens is one sequence.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use redb::Database;
use tokio::sync::{mpsc, oneshot, Notify};

use super::changes::store_error;
use super::tables::{DbResult, Tables};
use crate::lifecycle::Now;
use crate::store::{StoreError, StoreResult};

/// Most steps in one transaction.
const MAX_GROUP: usize = 1024;

/// One transition waiting for the writer.
trait Step: Send {
    fn apply(&mut self, tables: &mut Tables, now: Now) -> DbResult<()>;
    /// Answers the caller once the transaction committed (or failed).
    fn answer(self: Box<Self>, committed: Result<(), StoreError>);
}

struct Pending<T, F> {
    work: Option<F>,
    value: Option<T>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Step for Pending<T, F>
where
    T: Send,
    F: FnOnce(&mut Tables, Now) -> DbResult<T> + Send,
{
    fn apply(&mut self, tables: &mut Tables, now: Now) -> DbResult<()> {
        if let Some(work) = self.work.take() {
            self.value = Some(work(tables, now)?);
        }
        Ok(())
    }

    fn answer(self: Box<Self>, committed: Result<(), StoreError>) {
        let Pending { value, reply, .. } = *self;
        let answer = committed.and_then(|()| {
            value.ok_or_else(|| StoreError::Unavailable("a step did not run".into()))
        });
        let _ = reply.send(answer);
    }
}

/// Hands steps to the writer thread. Dropping it lets the thread finish what it was
/// given and waits for it, so that the file is closed (and unlocked) once the store is.
pub struct Writer {
    tx: Option<mpsc::Sender<Box<dyn Step>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Without a thread: the database and the signal steps commit on the caller's.
    inline: Option<(Arc<Database>, Arc<Notify>)>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Writer {
    /// Starts the writer thread; it signals `turns` after a transaction in which an
    /// ordering key's next notification took its turn (so is due now, or soon).
    pub fn start(db: Arc<Database>, turns: Arc<Notify>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(4 * MAX_GROUP);
        let thread = std::thread::Builder::new()
            .name("postback-store-writer".into())
            .spawn(move || run(&db, rx, &turns))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            inline: None,
        })
    }

    /// A writer without a thread: each step commits, alone, on the caller's thread.
    pub fn inline(db: Arc<Database>, turns: Arc<Notify>) -> Self {
        Self {
            tx: None,
            thread: None,
            inline: Some((db, turns)),
        }
    }

    /// Whether steps (and reads) run on the caller's thread.
    pub fn is_inline(&self) -> bool {
        self.inline.is_some()
    }

    /// Runs `work` in the next transaction; its result once that is on disk.
    pub async fn run<T, F>(&self, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tables, Now) -> DbResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let step = Pending {
            work: Some(work),
            value: None,
            reply,
        };
        if let Some((db, turns)) = &self.inline {
            let mut group: [Box<dyn Step>; 1] = [Box::new(step)];
            let committed = commit_guarded(db, &mut group);
            if matches!(committed, Ok(true)) {
                turns.notify_one();
            }
            let [step] = group;
            step.answer(committed.map(|_| ()));
            return answer
                .await
                .map_err(|_| StoreError::Unavailable("a step did not run".into()))?;
        }
        let gone = || StoreError::Unavailable("the embedded store's writer has stopped".into());
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        tx.send(Box::new(step)).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

fn run(db: &Database, mut rx: mpsc::Receiver<Box<dyn Step>>, turns: &Notify) {
    let mut group: Vec<Box<dyn Step>> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = rx.blocking_recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(step) => group.push(step),
                Err(_) => break,
            }
        }
        let committed = commit_guarded(db, &mut group);
        if matches!(committed, Ok(true)) {
            turns.notify_one();
        }
        let committed = committed.map(|_| ());
        for step in group.drain(..) {
            step.answer(committed.clone());
        }
    }
}

/// Commits the group (whether a turn was taken in it); a failure, or a panic in one of
/// its steps, fails the whole group and leaves the writer running.
fn commit_guarded(db: &Database, group: &mut [Box<dyn Step>]) -> Result<bool, StoreError> {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| commit(db, group)));
    let error = match outcome {
        Ok(Ok(turned)) => return Ok(turned),
        Ok(Err(e)) => store_error(e),
        Err(_) => StoreError::Corrupt("a step of the transaction panicked".into()),
    };
    tracing::error!(error = %error, steps = group.len(), "embedded store transaction failed; nothing of it was kept");
    Err(error)
}

fn commit(db: &Database, group: &mut [Box<dyn Step>]) -> DbResult<bool> {
    let tx = db.begin_write()?;
    let turned = {
        let now = Now::read();
        let mut tables = Tables::open(&tx, now)?;
        for step in group.iter_mut() {
            step.apply(&mut tables, now)?;
        }
        tables.turned
    };
    tx.commit()?;
    Ok(turned)
}

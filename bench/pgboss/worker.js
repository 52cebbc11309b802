'use strict';
// pg-boss worker: POSTs each job's data (the webhook's JSON body) to TARGET_URL, with
// CONCURRENCY (64) jobs in flight; a job whose POST fails or answers non-2xx is failed, and
// pg-boss retries it. Prints `ready` on stdout once it works the queue; otherwise quiet:
// errors on stderr at most once per second, silent exit on SIGTERM/SIGINT.
const { Agent, request } = require('undici');
const { QUEUE, cfg, connect, rateLimitedLogger, errText } = require('./common');

const TIMEOUT_MS = 10_000;
const BATCH = 16;
const log = rateLimitedLogger('pgboss-worker');

// With PGBOSS_NOTIFY=1, a job created wakes the workers at once (LISTEN/NOTIFY), as
// postback's registrations wake its scheduler. Off by default, as in pg-boss: on, each job
// sent on its own wakes the pollers to fetch it alone, and one at a time ran at about a
// third of the rate (BENCHMARKS.md, "pg-boss beside postback on Postgres").
const NOTIFY = process.env.PGBOSS_NOTIFY === '1';

// Four attempts, retried with pg-boss's exponential backoff from 1 s (with jitter), at most 4 s
// apart: near BullMQ's 1 s, 2 s, 4 s.
const QUEUE_OPTIONS = { retryLimit: 3, retryDelay: 1, retryBackoff: true, retryDelayMax: 4, notify: NOTIFY };

// The worker's transactions (fetching and completing jobs) commit without waiting for the
// WAL to reach the disk, as postback's claims and settles do: a commit lost in a crash of
// the database means a job delivered again, never lost. Jobs are still created with full
// commits (the producer's connections).
const BOSS_OPTIONS = {
  useListenNotify: NOTIFY,
  connectionString: `${cfg.databaseUrl}${cfg.databaseUrl.includes('?') ? '&' : '?'}options=${encodeURIComponent('-c synchronous_commit=off')}`,
};

// CONCURRENCY jobs in flight as pg-boss spreads them: localConcurrency pollers in this process,
// each fetching batchSize jobs at a time and delivering them together. A poller fetches again
// as soon as its batch is settled while batches come back full (burstWhenBatchFull; without it,
// it would wait out the polling interval after every batch, backlog or not), and every
// pollingIntervalSeconds otherwise: 0.5 s, the smallest pg-boss allows.
const batchSize = Math.min(BATCH, cfg.concurrency);
const WORK_OPTIONS = {
  batchSize,
  localConcurrency: Math.max(1, Math.floor(cfg.concurrency / batchSize)),
  pollingIntervalSeconds: 0.5,
  burstWhenBatchFull: true,
  perJobResults: true,
};

const agent = new Agent({
  connections: cfg.concurrency + 16, // keep-alive pool, one socket per in-flight job and some spare
  pipelining: 1,
  keepAliveTimeout: 30_000,
  keepAliveMaxTimeout: 60_000,
  connectTimeout: TIMEOUT_MS,
  headersTimeout: TIMEOUT_MS,
  bodyTimeout: TIMEOUT_MS,
});
const HEADERS = { 'content-type': 'application/json' };

async function deliver(data) {
  const res = await request(cfg.targetUrl, {
    method: 'POST',
    headers: HEADERS,
    body: JSON.stringify(data),
    dispatcher: agent,
    headersTimeout: TIMEOUT_MS,
    bodyTimeout: TIMEOUT_MS,
  });
  await res.body.dump(); // drain, so the socket goes back to the pool
  if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`HTTP ${res.statusCode}`);
}

/** Delivers a batch at once and settles each job on its own (perJobResults). */
function handle(jobs) {
  return Promise.all(
    jobs.map(job =>
      deliver(job.data).then(
        () => ({ id: job.id, status: 'completed' }),
        err => {
          log(`delivery failed: ${errText(err)}`);
          return { id: job.id, status: 'failed', output: { message: errText(err) } };
        },
      ),
    ),
  );
}

const boss = connect(WORK_OPTIONS.localConcurrency, log, BOSS_OPTIONS);

async function main() {
  await boss.start();
  await boss.createQueue(QUEUE, QUEUE_OPTIONS);
  await boss.work(QUEUE, WORK_OPTIONS, handle);
  process.stdout.write('ready\n');
}

let closing = false;
async function shutdown() {
  if (closing) return;
  closing = true;
  log.muted = true; // Postgres may already be gone: say nothing
  setTimeout(() => process.exit(0), 2000).unref(); // never hang
  try {
    await Promise.race([boss.stop({ graceful: false }), new Promise(r => setTimeout(r, 1000))]);
  } catch (_) {
    // ignore
  }
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
process.on('unhandledRejection', err => log(`unhandled rejection: ${errText(err)}`));

main().catch(err => {
  process.stderr.write(`[pgboss-worker] ${(err && err.stack) || err}\n`);
  process.exit(1);
});

'use strict';
// Enqueues N webhook jobs on pg-boss and prints ONE JSON line:
//   {"first_enqueue_ms","last_enqueue_ms","n","enqueue_s","enqueue_rate"}
//
//   node producer.js batch    insert() in chunks of 1000, 4 chunks in flight
//                             (postback-bench's --batch 1000 --producers 4)
//   node producer.js single   one send() per job, CONCURRENCY (64) in flight
//                             (postback-bench's POST /notify, one at a time)
// A job's data is the webhook's JSON body, which the worker POSTs as it is.
const { QUEUE, cfg, connect, rateLimitedLogger } = require('./common');

const CHUNK = 1000;
const CHUNKS_IN_FLIGHT = 4;
const log = rateLimitedLogger('pgboss-producer');

function body(tag, i, now) {
  return { id: `${tag}-${i}`, due: now, type: 'payment.succeeded', data: { amount: 1000, currency: 'usd' } };
}

/** Runs `task(k)` for every k in [0, count), `inFlight` at a time. */
async function pooled(count, inFlight, task) {
  let next = 0;
  const lane = async () => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, lane));
}

function batch(boss, tag) {
  return pooled(Math.ceil(cfg.n / CHUNK), CHUNKS_IN_FLIGHT, async c => {
    const now = Date.now();
    const jobs = [];
    for (let i = c * CHUNK; i < Math.min((c + 1) * CHUNK, cfg.n); i++) jobs.push({ data: body(tag, i, now) });
    await boss.insert(QUEUE, jobs);
  });
}

function single(boss, tag) {
  return pooled(cfg.n, cfg.concurrency, i => boss.send(QUEUE, body(tag, i, Date.now())));
}

const MODES = { batch: [batch, CHUNKS_IN_FLIGHT], single: [single, cfg.concurrency] };

async function main() {
  const mode = process.argv[2] || 'batch';
  if (!MODES[mode]) throw new Error(`mode must be one of ${Object.keys(MODES).join('|')}, got ${mode}`);
  const [enqueue, inFlight] = MODES[mode];
  // Only creates jobs: the worker's instance supervises and schedules.
  const boss = connect(inFlight, log, { supervise: false, schedule: false });
  await boss.start();

  const tag = Date.now().toString(36);
  const first = Date.now();
  await enqueue(boss, tag);
  const last = Date.now();
  await boss.stop({ graceful: false });

  const s = (last - first) / 1000;
  process.stdout.write(
    JSON.stringify({
      first_enqueue_ms: first,
      last_enqueue_ms: last,
      n: cfg.n,
      enqueue_s: s,
      enqueue_rate: s > 0 ? Math.round((cfg.n / s) * 10) / 10 : null,
    }) + '\n',
  );
  process.exit(0);
}

main().catch(err => {
  process.stderr.write(`[pgboss-producer] ${(err && err.stack) || err}\n`);
  process.exit(1);
});

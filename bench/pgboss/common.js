'use strict';
// Settings shared by producer.js and worker.js, all from the environment set by
// ../../scripts/pgboss.sh: DATABASE_URL (required), TARGET_URL, N, SCENARIO (burst),
// CONCURRENCY.

const { PgBoss } = require('pg-boss');

const QUEUE = 'webhooks';

function num(name, dflt) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return dflt;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} must be a non-negative number, got ${JSON.stringify(raw)}`);
  return v;
}

const cfg = Object.freeze({
  databaseUrl: process.env.DATABASE_URL,
  targetUrl: process.env.TARGET_URL || 'http://127.0.0.1:8080/hook',
  n: Math.floor(num('N', 20000)),
  scenario: process.env.SCENARIO || 'burst',
  concurrency: Math.max(1, Math.floor(num('CONCURRENCY', 64))),
});
if (!cfg.databaseUrl) throw new Error('DATABASE_URL must name the database pg-boss installs its schema in');
if (cfg.scenario !== 'burst') throw new Error(`SCENARIO must be burst, got ${cfg.scenario}`);

/**
 * A pg-boss instance on DATABASE_URL (not started) with a connection for each of `inFlight`
 * operations and two for pg-boss's own (start, maintenance), and `options` beside; its
 * errors go to `log`.
 */
function connect(inFlight, log, options = {}) {
  const boss = new PgBoss({ connectionString: cfg.databaseUrl, max: inFlight + 2, ...options });
  boss.on('error', err => log(`error: ${errText(err)}`));
  return boss;
}

/** A logger to stderr that writes at most one line per second and counts what it dropped. */
function rateLimitedLogger(prefix) {
  let last = 0;
  let dropped = 0;
  const log = msg => {
    if (log.muted) return;
    const now = Date.now();
    if (now - last < 1000) {
      dropped++;
      return;
    }
    last = now;
    const extra = dropped ? ` (${dropped} similar lines dropped)` : '';
    dropped = 0;
    process.stderr.write(`[${prefix}] ${msg}${extra}\n`);
  };
  log.muted = false;
  return log;
}

function errText(err) {
  return (err && (err.message || err.code)) || String(err);
}

module.exports = { QUEUE, cfg, connect, rateLimitedLogger, errText };

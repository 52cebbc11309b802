-- Version 1: the notifications, their indexes, idempotency keys, ordering keys, what
-- retention deleted, rate keys' quotas and the audit log. Ids and keys compare
-- byte-wise (COLLATE "C"), as on the other stores, so that pages keep one order.

-- One row per notification: its spec (store::spec's stored value), its record
-- (lifecycle's JSON), its attempt history (a JSON array), and the index it is in with
-- its time there (lifecycle::Index: due, inflight, dead, done).
CREATE TABLE postback.jobs (
    id text COLLATE "C" PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    ordering text COLLATE "C",
    spec text NOT NULL,
    record text NOT NULL,
    history text NOT NULL DEFAULT '[]',
    idx text COLLATE "C",
    at bigint
) WITH (
    -- Rows change state several times in a short life and are then deleted: vacuum
    -- early, so that the table and its indexes stay the size of what is kept.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    fillfactor = 80
);
CREATE INDEX jobs_by_index ON postback.jobs (idx, at, id);
CREATE INDEX jobs_by_tenant ON postback.jobs (tenant, idx, at, id);

-- An idempotency key within its tenant: `<id> <fingerprint>`, kept until `until` (ms).
CREATE TABLE postback.idempotency (
    key text COLLATE "C" PRIMARY KEY,
    kept text NOT NULL,
    until bigint NOT NULL
);
CREATE INDEX idempotency_by_until ON postback.idempotency (until);

-- Each ordering key's notifications in registration order, while they are scheduled
-- or in flight.
CREATE TABLE postback.orders (
    key text COLLATE "C" NOT NULL,
    place bigint NOT NULL,
    id text COLLATE "C" NOT NULL,
    PRIMARY KEY (key, place)
);

-- What retention deleted, per tenant and reason (dead_by_age, dead_by_count,
-- finished_by_age).
CREATE TABLE postback.trimmed (
    tenant text COLLATE "C" NOT NULL,
    reason text COLLATE "C" NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (tenant, reason)
);

-- A rate key's quota (policy::RateState, µs), while it says more than no row would.
CREATE TABLE postback.rates (
    key text COLLATE "C" PRIMARY KEY,
    tat_us bigint NOT NULL,
    paused_until_us bigint NOT NULL
);

-- Operators' actions (store::AuditRecord's JSON) by position: the database's time in
-- ms, and a sequence that orders entries of one millisecond.
CREATE TABLE postback.audit (
    at bigint NOT NULL,
    seq bigserial NOT NULL,
    entry text NOT NULL,
    PRIMARY KEY (at, seq)
);

-- Version 3: endpoints' health. One row per endpoint (a tenant's callback origin), keyed
-- `<tenant> <id>` in byte order as every store lists them, holding its record's JSON
-- (src/store/endpoints.rs); an empty record is a row made to be locked, not yet written.
CREATE TABLE postback.endpoints (
    key text COLLATE "C" PRIMARY KEY,
    record text NOT NULL
);

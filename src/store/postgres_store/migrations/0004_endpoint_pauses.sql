-- Version 4: paused endpoints. One row per paused endpoint, keyed as its record
-- (`<tenant> <id>`), holding its pause's JSON (src/store/endpoints.rs); resuming it
-- deletes the row. Every instance reads them all each second.
CREATE TABLE postback.endpoint_pauses (
    key text COLLATE "C" PRIMARY KEY,
    pause text NOT NULL
);

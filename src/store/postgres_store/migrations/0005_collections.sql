-- Version 5: collections (src/store/collections.rs): subscriptions, events and the
-- topics catalog, as documents keyed by their collection's name and a key, listed in the
-- byte order of their keys as every store lists them.
CREATE TABLE postback.documents (
    collection text NOT NULL,
    key text COLLATE "C" NOT NULL,
    doc text NOT NULL,
    PRIMARY KEY (collection, key)
);

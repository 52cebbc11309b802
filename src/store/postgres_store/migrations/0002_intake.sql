-- Version 2: registration inside a producer's own transaction. postback.notify() puts
-- the registration in postback.intake as part of the caller's transaction: rolled
-- back, it never existed; committed, an instance checks it with the rules of
-- POST /notify and stores it (or keeps it in postback.intake_refused with the error
-- the API would have answered), removing it from the intake in the same transaction.

-- Which database roles may register for which tenant (a grant to a role covers its
-- members).
CREATE TABLE postback.tenant_grants (
    role name NOT NULL,
    tenant text COLLATE "C" NOT NULL,
    PRIMARY KEY (role, tenant)
);

CREATE TABLE postback.intake (
    seq bigserial PRIMARY KEY,
    id text COLLATE "C" NOT NULL UNIQUE,
    tenant text COLLATE "C" NOT NULL,
    idempotency_key text COLLATE "C",
    -- The POST /notify body it stands for, and its fingerprint (as an idempotency key
    -- keeps it: the first 16 bytes of the SHA-256 of its text, in hex).
    request jsonb NOT NULL,
    fingerprint text NOT NULL,
    registered_by name NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX intake_by_key ON postback.intake (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE postback.intake_refused (
    id text COLLATE "C" PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    request jsonb NOT NULL,
    -- As the API answers it: {"code": ..., "message": ..., "field": ...}.
    error jsonb NOT NULL,
    registered_by name NOT NULL,
    registered_at timestamptz NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Kept as long as dead letters are (retention.dead_max_age).
CREATE INDEX intake_refused_by_age ON postback.intake_refused (refused_at);

-- Registers a notification as part of the caller's transaction; its id. `options` takes
-- the other fields of POST /notify (schedule, delay, topic, ordering_key, tenant, ...)
-- and `idempotency_key`. Refused here: a role without a grant for the tenant (42501),
-- an option POST /notify does not have or a value of the wrong JSON type (22023), an
-- idempotency key first used with another request (23505). Everything else is checked
-- by the instance that takes it in, as POST /notify checks it.
CREATE FUNCTION postback.notify(url text, body jsonb, options jsonb DEFAULT '{}')
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known constant text[] := ARRAY['headers', 'schedule', 'delay', 'timeout', 'expect_body',
        'success', 'profile', 'topic', 'rate_key', 'tenant', 'ordering_key', 'idempotency_key'];
    strings constant text[] := ARRAY['delay', 'timeout', 'expect_body', 'profile', 'topic',
        'rate_key', 'tenant', 'ordering_key', 'idempotency_key'];
    field text;
    for_tenant text;
    idem_key text;
    request jsonb;
    print text;
    taken record;
    new_id text;
BEGIN
    IF url IS NULL OR url !~* '^https?://' THEN
        RAISE EXCEPTION 'postback.notify: url: an http or https URL is required'
            USING ERRCODE = '22023', DETAIL = '{"field":"url"}';
    END IF;
    IF body IS NULL THEN
        RAISE EXCEPTION 'postback.notify: body: required'
            USING ERRCODE = '22023', DETAIL = '{"field":"body"}';
    END IF;
    options := coalesce(options, '{}');
    IF jsonb_typeof(options) <> 'object' THEN
        RAISE EXCEPTION 'postback.notify: options: a JSON object is required'
            USING ERRCODE = '22023', DETAIL = '{"field":"options"}';
    END IF;
    FOR field IN SELECT jsonb_object_keys(options) LOOP
        IF NOT field = ANY (known) THEN
            RAISE EXCEPTION 'postback.notify: %: unknown field (one of %)', field, array_to_string(known, ', ')
                USING ERRCODE = '22023', DETAIL = json_build_object('field', field)::text;
        END IF;
        IF field = ANY (strings) AND jsonb_typeof(options -> field) <> 'string' THEN
            RAISE EXCEPTION 'postback.notify: %: a string is required', field
                USING ERRCODE = '22023', DETAIL = json_build_object('field', field)::text;
        END IF;
    END LOOP;
    for_tenant := coalesce(options ->> 'tenant', 'default');
    IF NOT EXISTS (
        SELECT 1 FROM postback.tenant_grants g
        WHERE g.tenant = for_tenant AND pg_has_role(session_user, g.role, 'MEMBER')
    ) THEN
        RAISE EXCEPTION 'postback.notify: role % may not register for tenant %', session_user, for_tenant
            USING ERRCODE = '42501', DETAIL = '{"field":"tenant"}',
                  HINT = 'INSERT INTO postback.tenant_grants (role, tenant) VALUES (<role>, <tenant>)';
    END IF;
    idem_key := options ->> 'idempotency_key';
    request := (options - 'idempotency_key') || jsonb_build_object('url', url, 'body', body);
    print := encode(substr(sha256(convert_to(request::text, 'UTF8')), 1, 16), 'hex');
    new_id := 'ntf_0_' || replace(gen_random_uuid()::text, '-', '');
    IF idem_key IS NULL THEN
        INSERT INTO postback.intake (id, tenant, request, fingerprint, registered_by)
        VALUES (new_id, for_tenant, request, print, session_user);
        PERFORM pg_notify('postback_intake', '');
        RETURN new_id;
    END IF;
    -- The key's registration: taken in already (while its key is kept), waiting in the
    -- intake, or this one. A registration of the same key in a transaction not yet
    -- committed makes the insert wait for it; one taken in meanwhile is looked for again.
    LOOP
        SELECT split_part(i.kept, ' ', 1) AS id, split_part(i.kept, ' ', 2) AS fingerprint
        INTO taken FROM postback.idempotency i
        WHERE i.key = CASE WHEN for_tenant = 'default' THEN idem_key ELSE for_tenant || ' ' || idem_key END
          AND i.until > (extract(epoch FROM clock_timestamp()) * 1000)::int8;
        IF NOT FOUND THEN
            INSERT INTO postback.intake (id, tenant, idempotency_key, request, fingerprint, registered_by)
            VALUES (new_id, for_tenant, idem_key, request, print, session_user)
            ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            IF FOUND THEN
                PERFORM pg_notify('postback_intake', '');
                RETURN new_id;
            END IF;
            SELECT i.id, i.fingerprint INTO taken FROM postback.intake i
            WHERE i.tenant = for_tenant AND i.idempotency_key = idem_key;
        END IF;
        IF FOUND THEN
            IF taken.fingerprint <> print THEN
                RAISE EXCEPTION 'postback.notify: idempotency_key: % registered % with another request', idem_key, taken.id
                    USING ERRCODE = '23505', DETAIL = '{"field":"idempotency_key","code":"idempotency_key_mismatch"}';
            END IF;
            RETURN taken.id;
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION postback.notify(text, jsonb, jsonb) FROM PUBLIC;

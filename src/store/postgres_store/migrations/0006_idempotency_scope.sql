-- Version 6: an idempotency key's tenant kept in a column of its own, so that no key of
-- one tenant can spell another's; postback.notify() checks what POST /notify checks,
-- by the rules postback writes into postback.intake_rules, holds a repeated key to the
-- fingerprint postback computes, and makes ids of the API's kind.

ALTER TABLE postback.idempotency ADD COLUMN tenant text COLLATE "C";
-- A key's tenant is its notification's, where that is still kept (so a key an earlier
-- build stored for the default tenant stays the default tenant's, whatever it spells).
UPDATE postback.idempotency i
SET tenant = j.tenant,
    key = CASE WHEN j.tenant = 'default' THEN i.key ELSE substr(i.key, length(j.tenant) + 2) END
FROM postback.jobs j
WHERE j.id = split_part(i.kept, ' ', 1);
-- Without its notification, a key without a space was the default tenant's; one with a
-- space cannot be told apart from another tenant's, and names nothing: forgotten.
UPDATE postback.idempotency SET tenant = 'default'
WHERE tenant IS NULL AND position(' ' IN key) = 0;
DELETE FROM postback.idempotency WHERE tenant IS NULL;
ALTER TABLE postback.idempotency ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE postback.idempotency DROP CONSTRAINT idempotency_pkey;
ALTER TABLE postback.idempotency ADD PRIMARY KEY (tenant, key);

-- What postback.notify() refuses, as POST /notify refuses it: written by each postback
-- instance as it starts, from its own rules (IdempotencyKey::PATTERN, the error the API
-- answers, server.max_body_bytes). Until one has, only the instance that takes a
-- registration in checks these.
CREATE TABLE postback.intake_rules (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    key_pattern text NOT NULL,
    -- The API's error for a key that does not match, as JSON text.
    key_error text NOT NULL,
    max_request_bytes bigint NOT NULL,
    size_error text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A notification id as the API makes them (JobId): ntf_0_ and a UUID v7 (48 bits of
-- ms, version 7, 12 random bits, variant 10, 62 random bits) in 22 base-62 digits.
CREATE FUNCTION postback.new_id() RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    digits constant text := '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
    random constant bytea := decode(replace(gen_random_uuid()::text, '-', ''), 'hex');
    n numeric := floor(extract(epoch FROM clock_timestamp()) * 1000);
    id text := '';
BEGIN
    n := (n * 16 + 7) * 4096 + (get_byte(random, 0) & 15) * 256 + get_byte(random, 1);
    n := (n * 4 + 2) * 64 + (get_byte(random, 2) & 63);
    FOR i IN 3..9 LOOP
        n := n * 256 + get_byte(random, i);
    END LOOP;
    FOR i IN 1..22 LOOP
        id := substr(digits, mod(n, 62)::int + 1, 1) || id;
        n := div(n, 62);
    END LOOP;
    RETURN 'ntf_0_' || id;
END
$$;

-- As version 2's, with the key's tenant a column of its own, the checks of
-- postback.intake_rules, the fingerprint of the request's canonical text (`j` and the
-- first 16 bytes of the SHA-256 of the jsonb's text: Fingerprint in postback) and ids of
-- postback.new_id(). A key kept with a fingerprint of another form (an earlier build's)
-- answers its notification whatever the request, as postback does.
CREATE OR REPLACE FUNCTION postback.notify(url text, body jsonb, options jsonb DEFAULT '{}')
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
    rules postback.intake_rules;
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
    -- No rules written yet: every field is null, and neither check refuses.
    SELECT * INTO rules FROM postback.intake_rules;
    IF idem_key !~ rules.key_pattern THEN
        RAISE EXCEPTION 'postback.notify: %', rules.key_error::jsonb ->> 'message'
            USING ERRCODE = '22023', DETAIL = rules.key_error;
    END IF;
    IF octet_length(request::text) > rules.max_request_bytes THEN
        RAISE EXCEPTION 'postback.notify: %', rules.size_error::jsonb ->> 'message'
            USING ERRCODE = '54000', DETAIL = rules.size_error;
    END IF;
    print := 'j' || encode(substr(sha256(convert_to(request::text, 'UTF8')), 1, 16), 'hex');
    new_id := postback.new_id();
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
        WHERE i.tenant = for_tenant AND i.key = idem_key
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
            IF taken.fingerprint LIKE 'j%' AND taken.fingerprint <> print THEN
                RAISE EXCEPTION 'postback.notify: idempotency_key: % registered % with another request', idem_key, taken.id
                    USING ERRCODE = '23505', DETAIL = '{"field":"idempotency_key","code":"idempotency_key_mismatch"}';
            END IF;
            RETURN taken.id;
        END IF;
    END LOOP;
END
$$;

-- Version 8: a producer reads why its registration was refused when taken in, for the
-- tenants its role is granted only. postback.intake_refused holds every tenant's
-- refused registrations, so a producer is given no right on it; postback.refusal()
-- reads it with its owner's rights and answers a role only what postback.notify()
-- would have let it register.

-- The error POST /notify would have answered ({"code", "message", "field"}) for the
-- registration `id` that postback.notify() returned, if it was refused and is still
-- kept (retention.dead_max_age), and the calling role is granted its tenant in
-- postback.tenant_grants (itself or a role it is a member of); null otherwise, as for
-- an id that was never refused, so that no role learns anything of another tenant's.
CREATE FUNCTION postback.refusal(id text)
RETURNS jsonb
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.error FROM postback.intake_refused r
    WHERE r.id = refusal.id
      AND EXISTS (
          SELECT 1 FROM postback.tenant_grants g
          WHERE g.tenant = r.tenant AND pg_has_role(session_user, g.role, 'MEMBER')
      )
$$;
REVOKE ALL ON FUNCTION postback.refusal(text) FROM PUBLIC;

-- Version 7: an audit entry keeps the tenant it is about in a column of its own, so that
-- a tenant's auditors read its entries alone (by `audit_by_tenant`), whatever other
-- tenants' operators do. Entries about every tenant at once have none.
ALTER TABLE postback.audit ADD COLUMN tenant text COLLATE "C";
UPDATE postback.audit SET tenant = entry::jsonb ->> 'tenant';
CREATE INDEX audit_by_tenant ON postback.audit (tenant, at, seq);

-- Version 9: registrations refused at intake are kept as long as their tenant's dead
-- letters and deleted tenant by tenant, so they are found by tenant and age
-- (`intake_refused_by_tenant`): a tenant whose every registration is refused is found
-- by the sweep, and deleting one tenant's reads none of another's.
CREATE INDEX intake_refused_by_tenant ON postback.intake_refused (tenant, refused_at);

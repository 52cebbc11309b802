//! `Endpoint`: a tenant's callback origin (scheme, host and port), the unit whose health
//! is followed. A receiver's health is its server's, not one path's, so every callback of
//! a tenant at one origin is one endpoint; two tenants calling the same origin are two
//! endpoints, each seeing only its own. `EndpointId` names one in the API.

use std::fmt;

use sha2::{Digest, Sha256};

use super::{FieldError, Tenant};

/// Hex digits of an id after its `ep_` prefix: 96 bits of the digest.
const ID_HEX: usize = 24;

/// The key an endpoint's record is kept under, on every store: its tenant, then its id.
pub fn record_key(tenant: &Tenant, id: &EndpointId) -> String {
    format!("{tenant} {id}")
}

/// One tenant's callback origin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub tenant: Tenant,
    /// `scheme://host[:port]`, the port written only when it is not the scheme's own.
    pub origin: String,
}

impl Endpoint {
    /// The endpoint `url` belongs to for `tenant`; `None` for a URL without a host, which
    /// no callback has.
    pub fn of(tenant: &Tenant, url: &url::Url) -> Option<Self> {
        let origin = url.origin();
        origin.is_tuple().then(|| Self {
            tenant: tenant.clone(),
            origin: origin.ascii_serialization(),
        })
    }

    /// The endpoint of a stored callback URL (`None` if it cannot be read as one).
    pub fn of_text(tenant: &Tenant, url: &str) -> Option<Self> {
        Self::of(tenant, &url::Url::parse(url).ok()?)
    }

    /// Its id: the same on every instance and store, different for each tenant.
    pub fn id(&self) -> EndpointId {
        let mut digest = Sha256::new();
        digest.update(self.tenant.as_bytes());
        digest.update([0]);
        digest.update(self.origin.as_bytes());
        let hex: String = digest.finalize()[..ID_HEX / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        EndpointId(format!("ep_{hex}"))
    }
}

/// An endpoint's id, `ep_` and 24 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(String);

impl EndpointId {
    /// Validates `raw`; errors are reported against `field`.
    pub fn parse(raw: &str, field: &str) -> Result<Self, FieldError> {
        let hex = raw.strip_prefix("ep_").unwrap_or_default();
        let ok = hex.len() == ID_HEX
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match ok {
            true => Ok(Self(raw.to_string())),
            false => Err(FieldError::new(
                field,
                format!("an endpoint id is `ep_` and {ID_HEX} lowercase hex digits"),
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(tenant: &str, url: &str) -> Endpoint {
        let tenant = Tenant::parse(tenant, "tenant").unwrap();
        Endpoint::of_text(&tenant, url).unwrap()
    }

    #[test]
    fn an_endpoint_is_the_origin_of_its_callbacks() {
        let a = endpoint("shop-a", "https://pay.example.com/notify/1?x=2");
        assert_eq!(a.origin, "https://pay.example.com");
        assert_eq!(a, endpoint("shop-a", "https://pay.example.com:443/other"));
        assert_eq!(
            endpoint("shop-a", "http://127.0.0.1:8080/cb").origin,
            "http://127.0.0.1:8080"
        );
        assert_ne!(a, endpoint("shop-a", "http://pay.example.com/notify/1"));
    }

    #[test]
    fn each_tenant_has_its_own_id_for_an_origin() {
        let a = endpoint("shop-a", "https://pay.example.com/n").id();
        let b = endpoint("shop-b", "https://pay.example.com/n").id();
        assert_ne!(a, b);
        assert_eq!(a, endpoint("shop-a", "https://pay.example.com/m").id());
        assert_eq!(EndpointId::parse(a.as_str(), "id"), Ok(a));
    }

    #[test]
    fn an_id_is_checked_as_it_is_read() {
        for bad in [
            "",
            "ep_",
            "ep_123",
            "xx_0123456789abcdef01234567",
            "ep_0123456789ABCDEF01234567",
        ] {
            let e = EndpointId::parse(bad, "id").unwrap_err();
            assert_eq!(e.field, "id", "{bad}");
        }
    }
}

//! `GET /signing-keys`: the ed25519 public keys (`whpk_…`) that verify a tenant's `v1a`
//! signatures. Public keys are public: the route needs no token, so that a merchant's
//! receiver can fetch them and verify deliveries without holding any secret. It answers
//! alike for every well-formed tenant name, configured or not (a name that is not
//! configured gets the keys its deliveries would be signed with), at the same cost
//! (`Signer::public_keys`), so that neither what it answers nor how long it takes tells
//! anybody which tenants exist.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{invalid_query, ApiError, ErrorBody};
use super::AppState;
use crate::domain::Tenant;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct KeysQuery {
    /// Whose keys; default `default`.
    tenant: Option<String>,
}

/// The keys that sign a tenant's deliveries now: its own, or ones derived from the
/// instance's when it has none (the instance's own for the `default` tenant). During a
/// rotation there are several; a signature that verifies with any of them is good.
#[derive(Debug, Serialize, ToSchema)]
pub struct SigningKeys {
    pub tenant: String,
    pub keys: Vec<PublicKey>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PublicKey {
    /// The signature it verifies: `v1a,` in `webhook-signature`.
    #[schema(example = "v1a")]
    pub version: &'static str,
    #[schema(example = "ed25519")]
    pub algorithm: &'static str,
    /// `whpk_` and the base64 of the 32-byte public key.
    #[schema(example = "whpk_ZpfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKY=")]
    pub public_key: String,
}

/// The public keys that verify a tenant's `v1a` signatures. No token needed.
#[utoipa::path(
    get,
    path = "/signing-keys",
    operation_id = "listSigningKeys",
    tag = "operations",
    params(KeysQuery),
    responses(
        (status = 200, body = SigningKeys),
        (status = 400, description = "An unknown query parameter", body = ErrorBody),
        (status = 422, description = "A tenant name that cannot be one", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<KeysQuery>, QueryRejection>,
) -> Result<Json<SigningKeys>, ApiError> {
    let Query(q) = query.map_err(invalid_query)?;
    let tenant = match q.tenant.as_deref() {
        None => Tenant::default(),
        Some(raw) => Tenant::parse(raw, "tenant")?,
    };
    let keys = state.signer.public_keys(&tenant);
    let keys = keys.into_iter().map(|public_key| PublicKey {
        version: "v1a",
        algorithm: "ed25519",
        public_key,
    });
    Ok(Json(SigningKeys {
        tenant: tenant.to_string(),
        keys: keys.collect(),
    }))
}

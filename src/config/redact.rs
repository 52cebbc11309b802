//! Settings with their secrets taken out, for `postback config check` and for logs: API
//! and metrics tokens, the portal secret, the SHA-256 of each configured token (a hash of a short token can
//! be reversed, and an init container's logs are read by many), signing secrets and
//! keys, and the passwords in store and proxy URLs.

use super::{Settings, StringList};

/// What a secret is shown as.
const REDACTED: &str = "REDACTED";

impl Settings {
    /// A copy that can be printed: every secret replaced by `REDACTED`, one per secret
    /// so that their number still shows.
    pub fn redacted(&self) -> Settings {
        let mut s = self.clone();
        s.server.api_tokens = hidden(&s.server.api_tokens);
        if s.server.metrics_token.is_some() {
            s.server.metrics_token = Some(REDACTED.into());
        }
        if s.server.portal_secret.is_some() {
            s.server.portal_secret = Some(REDACTED.into());
        }
        s.store.redis_url = s.store.redis_url.as_deref().map(url);
        s.store.postgres_url = s.store.postgres_url.as_deref().map(url);
        s.delivery.proxy = s.delivery.proxy.as_deref().map(url);
        s.store.cluster_urls = s.store.cluster_urls.iter().map(|u| url(u)).collect();
        s.signing.secrets = hidden(&s.signing.secrets);
        s.signing.keys = hidden(&s.signing.keys);
        for token in s.tokens.values_mut() {
            token.sha256 = REDACTED.into();
        }
        for tenant in s.tenants.values_mut() {
            tenant.secrets = hidden(&tenant.secrets);
            tenant.keys = hidden(&tenant.keys);
        }
        for secrets in s.secrets.values_mut() {
            *secrets = hidden(secrets);
        }
        s
    }
}

fn hidden(list: &StringList) -> StringList {
    list.iter().map(|_| REDACTED.to_string()).collect()
}

/// The URL with its password, if it has one, replaced: in its user part, or in a
/// `password` parameter (as Postgres URLs may carry it).
pub fn url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() || has_password_parameter(&u) => {
            let _ = u.set_password(u.password().map(|_| REDACTED));
            let pairs: Vec<(String, String)> = u.query_pairs().into_owned().collect();
            if has_password_parameter(&u) {
                let mut query = u.query_pairs_mut();
                query.clear();
                for (k, v) in &pairs {
                    let secret = k.eq_ignore_ascii_case("password");
                    query.append_pair(k, if secret { REDACTED } else { v });
                }
            }
            u.to_string()
        }
        _ => url.to_string(),
    }
}

fn has_password_parameter(u: &url::Url) -> bool {
    u.query_pairs()
        .any(|(k, _)| k.eq_ignore_ascii_case("password"))
}

//! Settings with their secrets taken out, for `postback config check` and for logs: API
//! and metrics tokens, the portal secret, the SHA-256 of each configured token (a hash of a short token can
//! be reversed, and an init container's logs are read by many), signing secrets and
//! keys, the credentials in store and proxy addresses (`address`, which every place
//! that prints one uses), and the Redis and sentinels' passwords of Sentinel's keys.

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
        if s.store.redis_password.is_some() {
            s.store.redis_password = Some(REDACTED.into());
        }
        if s.store.redis_sentinel_password.is_some() {
            s.store.redis_sentinel_password = Some(REDACTED.into());
        }
        s.store.redis_url = s.store.redis_url.as_deref().map(address);
        s.store.postgres_url = s.store.postgres_url.as_deref().map(address);
        s.delivery.proxy = s.delivery.proxy.as_deref().map(address);
        s.store.cluster_urls = s.store.cluster_urls.iter().map(|u| address(u)).collect();
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

/// `address` with each credential in it replaced by `REDACTED`, in every form the
/// settings take a store's or the proxy's address: a URL's password
/// (`redis://user:pw@…`, `rediss://:pw@…`, `postgres://user:pw@…`), a URL's parameter
/// that holds one (`?password=`, a Redis socket's `?pass=`), and the same of a libpq
/// `key=value` string (`host=db password='a b'`). A parameter holds one when its name
/// has `pass` in it (`password`, `sslpassword`, `passfile`, `pass`). It reads the text
/// as the strictest of the stores' parsers might, hiding more rather than less: a URL's
/// password runs from the first `:` after `//` to its last `@`, and a `key=value`
/// string that stops making sense is hidden from there on.
pub fn address(address: &str) -> String {
    match address.split_once("://") {
        Some((scheme, rest)) if is_scheme(scheme) => {
            format!("{scheme}://{}", url_rest(rest))
        }
        _ => key_values(address),
    }
}

/// Whether `text` is a URL scheme (`redis`, `postgresql`, `redis+unix`).
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// Whether a parameter named `name` (percent-encoded or not) holds a credential.
fn is_secret(name: &str) -> bool {
    let decoded: String = url::form_urlencoded::parse(name.as_bytes())
        .map(|(k, _)| k.into_owned())
        .collect();
    decoded.to_ascii_lowercase().contains("pass")
}

/// A URL after its `scheme://`: the user's password, then the secret parameters.
fn url_rest(rest: &str) -> String {
    let (user, place) = match rest.rsplit_once('@') {
        Some((info, place)) => match info.split_once(':') {
            Some((name, _)) => (format!("{name}:{REDACTED}@"), place),
            None => (format!("{info}@"), place),
        },
        None => (String::new(), rest),
    };
    let Some((path, query)) = place.split_once('?') else {
        return format!("{user}{place}");
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, format!("#{fragment}")),
        None => (query, String::new()),
    };
    let parameters: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret(name) => format!("{name}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{user}{path}?{}{fragment}", parameters.join("&"))
}

/// A libpq `key=value` string (as `tokio_postgres` reads it) with the values of the
/// secret keys replaced, spacing kept; from a part it cannot read, all is hidden.
fn key_values(text: &str) -> String {
    let mut shown = String::new();
    let mut rest = text;
    loop {
        let key_at = rest.len() - rest.trim_start().len();
        shown.push_str(&rest[..key_at]);
        rest = &rest[key_at..];
        if rest.is_empty() {
            return shown;
        }
        let key_len = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let (key, after_key) = rest.split_at(key_len);
        let equals = after_key.trim_start();
        let Some(after_equals) = equals.strip_prefix('=') else {
            shown.push_str(REDACTED);
            return shown;
        };
        let value_at = after_equals.len() - after_equals.trim_start().len();
        let Some(value_len) = value_len(&after_equals[value_at..]) else {
            shown.push_str(&rest[..rest.len() - after_equals.len() + value_at]);
            shown.push_str(REDACTED);
            return shown;
        };
        let value_start = rest.len() - after_equals.len() + value_at;
        shown.push_str(&rest[..value_start]);
        let value = &rest[value_start..value_start + value_len];
        shown.push_str(if is_secret(key) { REDACTED } else { value });
        rest = &rest[value_start + value_len..];
    }
}

/// The length of the value `text` starts with: `'quoted'` (with `\` escapes) or up to
/// the next white space; `None` when a quote is not closed or there is no value.
fn value_len(text: &str) -> Option<usize> {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return Some(i + 1),
            c if c.is_whitespace() && !quoted => return Some(i),
            _ => {}
        }
    }
    (!quoted && !text.is_empty()).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each form a store or proxy address takes, and what is shown of it.
    const FORMS: &[(&str, &str)] = &[
        ("redis://10.0.0.5:6379/0", "redis://10.0.0.5:6379/0"),
        (
            "redis://:pw-1@10.0.0.5:6379/0",
            "redis://:REDACTED@10.0.0.5:6379/0",
        ),
        (
            "redis://app:pw-1@cache:6379",
            "redis://app:REDACTED@cache:6379",
        ),
        (
            "rediss://app:pw-1@cache:6380/#insecure",
            "rediss://app:REDACTED@cache:6380/#insecure",
        ),
        ("redis://app@cache:6379", "redis://app@cache:6379"),
        ("redis://:p@w/1?@cache:6379", "redis://:REDACTED@cache:6379"),
        (
            "redis+unix:///run/redis.sock?db=2&pass=pw-1",
            "redis+unix:///run/redis.sock?db=2&pass=REDACTED",
        ),
        (
            "postgres://pb:pw-1@db:5432/postback",
            "postgres://pb:REDACTED@db:5432/postback",
        ),
        (
            "postgresql://pb:pw-1@db1:5432,db2:5433/pb?sslmode=disable",
            "postgresql://pb:REDACTED@db1:5432,db2:5433/pb?sslmode=disable",
        ),
        (
            "postgres://db/pb?user=pb&password=pw-1",
            "postgres://db/pb?user=pb&password=REDACTED",
        ),
        (
            "postgres://db/pb?Pass%77ord=pw-1&sslpassword=pw-2",
            "postgres://db/pb?Pass%77ord=REDACTED&sslpassword=REDACTED",
        ),
        (
            "postgres://db/pb?passfile=/run/pw-1",
            "postgres://db/pb?passfile=REDACTED",
        ),
        (
            "host=db port=5432 user=pb password=pw-1 dbname=pb",
            "host=db port=5432 user=pb password=REDACTED dbname=pb",
        ),
        (
            "host=db password = 'pw 1\\' x' dbname=pb",
            "host=db password = REDACTED dbname=pb",
        ),
        (
            "host=db passfile=/run/pw-1 sslpassword=pw\\ 2",
            "host=db passfile=REDACTED sslpassword=REDACTED",
        ),
        ("host=db password='pw-1", "host=db password=REDACTED"),
        ("host=db password pw-1", "host=db REDACTED"),
        (
            "http://egress:pw-1@10.0.0.9:3128",
            "http://egress:REDACTED@10.0.0.9:3128",
        ),
    ];

    #[test]
    fn every_form_of_an_address_is_shown_without_its_password() {
        for (given, shown) in FORMS {
            let redacted = address(given);
            assert_eq!(&redacted, shown, "{given}");
            assert!(!redacted.contains("pw"), "{given} shown as {redacted}");
        }
    }
}

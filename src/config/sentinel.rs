//! Redis through Sentinel: `store.redis_sentinels` read into `SentinelTarget` (each
//! sentinel's `host:port`, a `NodeAddress`, the primary's name, the sentinels' credentials and the data
//! nodes' credentials and database, and whether each is reached over TLS), and the keys
//! that apply to it refused without it.

use std::fmt;
use std::str::FromStr;

use anyhow::bail;

use super::StoreSettings;

/// `store.redis_master_name` unless set: the name Redis's own examples give the primary.
pub const DEFAULT_MASTER_NAME: &str = "mymaster";

/// A node's address, a sentinel's or one a sentinel names: a host name or IP address,
/// and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// An IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
}

impl FromStr for NodeAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let problem = || format!("`{text}` is not host:port (e.g. 10.0.0.1:26379)");
        let (host, port) = text.rsplit_once(':').ok_or_else(problem)?;
        let port = port.parse::<u16>().ok().filter(|p| *p > 0);
        let host = url::Host::parse(host).map_err(|_| problem())?;
        Ok(Self {
            host: match host {
                url::Host::Ipv6(ip) => ip.to_string(),
                other => other.to_string(),
            },
            port: port.ok_or_else(problem)?,
        })
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// A user and password to authenticate with; the password is never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "REDACTED"))
            .finish()
    }
}

/// Where the sentinels are, which primary of theirs keeps the notifications, and how to
/// authenticate with each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub sentinels: Vec<NodeAddress>,
    pub master_name: String,
    /// The sentinels' own.
    pub sentinel_auth: Credentials,
    /// The primary's (and its replicas').
    pub node_auth: Credentials,
    pub db: u32,
    /// Whether the sentinels are reached over TLS (`store.redis_sentinels_tls`).
    pub sentinels_tls: bool,
    /// Whether the data nodes are (`store.redis_tls`, as the sentinels unless set).
    pub nodes_tls: bool,
}

impl SentinelTarget {
    /// The sentinels when `store.redis_sentinels` is set, each address checked, set alone
    /// of the Redis keys; none otherwise, when the keys that apply to it only are refused.
    pub(super) fn read(s: &StoreSettings) -> anyhow::Result<Option<Self>> {
        const KEY: &str = "store.redis_sentinels (POSTBACK_STORE_REDIS_SENTINELS)";
        if s.redis_sentinels.is_empty() {
            refuse_without_sentinels(s)?;
            return Ok(None);
        }
        if s.redis_url.is_some() {
            bail!("{KEY}: set it or store.redis_url, not both");
        }
        if !s.cluster_urls.is_empty() {
            bail!("{KEY}: set it or store.cluster_urls, not both (a Redis Cluster fails over by itself)");
        }
        let sentinels = s
            .redis_sentinels
            .iter()
            .map(|a| a.parse::<NodeAddress>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{KEY}: {e}"))?;
        if let Some(twice) = listed_twice(&sentinels) {
            bail!("{KEY}: {twice} is listed twice; each sentinel counts once toward the majority that names the primary");
        }
        let name = &s.redis_master_name;
        if name.is_empty() || name.contains(char::is_whitespace) {
            bail!("store.redis_master_name (POSTBACK_STORE_REDIS_MASTER_NAME): `{name}` is not a name the sentinels can know: one word, as in their `sentinel monitor <name> …`");
        }
        Ok(Some(Self {
            sentinels,
            master_name: name.clone(),
            sentinel_auth: Credentials {
                username: s.redis_sentinel_username.clone(),
                password: s.redis_sentinel_password.clone(),
            },
            node_auth: Credentials {
                username: s.redis_username.clone(),
                password: s.redis_password.clone(),
            },
            db: s.redis_db,
            sentinels_tls: s.redis_sentinels_tls,
            nodes_tls: s.redis_tls.unwrap_or(s.redis_sentinels_tls),
        }))
    }
}

/// A sentinel that `sentinels` lists more than once, if one is.
fn listed_twice(sentinels: &[NodeAddress]) -> Option<&NodeAddress> {
    let mut each = sentinels.iter().enumerate();
    each.find(|(n, s)| sentinels[..*n].contains(s))
        .map(|(_, s)| s)
}

/// The keys that apply through Sentinel only, refused when no sentinel is named: set
/// alone, they would leave the store on whatever else is configured.
fn refuse_without_sentinels(s: &StoreSettings) -> anyhow::Result<()> {
    let only_through_sentinel = [
        (
            "store.redis_master_name (POSTBACK_STORE_REDIS_MASTER_NAME)",
            s.redis_master_name != DEFAULT_MASTER_NAME,
        ),
        (
            "store.redis_sentinel_username (POSTBACK_STORE_REDIS_SENTINEL_USERNAME)",
            s.redis_sentinel_username.is_some(),
        ),
        (
            "store.redis_sentinel_password (POSTBACK_STORE_REDIS_SENTINEL_PASSWORD)",
            s.redis_sentinel_password.is_some(),
        ),
        (
            "store.redis_username (POSTBACK_STORE_REDIS_USERNAME)",
            s.redis_username.is_some(),
        ),
        (
            "store.redis_password (POSTBACK_STORE_REDIS_PASSWORD)",
            s.redis_password.is_some(),
        ),
        ("store.redis_db (POSTBACK_STORE_REDIS_DB)", s.redis_db != 0),
        (
            "store.redis_sentinels_tls (POSTBACK_STORE_REDIS_SENTINELS_TLS)",
            s.redis_sentinels_tls,
        ),
        (
            "store.redis_sentinels_tls_server_name (POSTBACK_STORE_REDIS_SENTINELS_TLS_SERVER_NAME)",
            s.redis_sentinels_tls_server_name.is_some(),
        ),
        ("store.redis_tls (POSTBACK_STORE_REDIS_TLS)", s.redis_tls.is_some()),
    ];
    match only_through_sentinel.iter().find(|(_, set)| *set) {
        Some((key, _)) => bail!("{key}: applies through Sentinel only, and store.redis_sentinels is not set; with store.redis_url the user, password, database and TLS are the URL's (rediss://user:password@host:6379/0)"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_a_host_and_a_port() {
        let read = |t: &str| t.parse::<NodeAddress>();
        let a = read("sentinel-0.redis:26379").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("sentinel-0.redis", 26379));
        let v6 = read("[::1]:26379").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.to_string()),
            ("::1", "[::1]:26379".into())
        );
        assert_eq!(
            read("10.0.0.1:26379").unwrap().to_string(),
            "10.0.0.1:26379"
        );
        for bad in [
            "10.0.0.1",
            "10.0.0.1:0",
            ":26379",
            "redis://10.0.0.1:26379",
            "a b:1",
            "h:port",
        ] {
            let err = read(bad).unwrap_err();
            assert!(
                err.contains(bad) && err.contains("host:port"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_sentinel_listed_twice_is_refused() {
        let read = |list: &str| {
            let settings = StoreSettings {
                redis_sentinels: crate::config::StringList::from_csv(list),
                ..StoreSettings::default()
            };
            SentinelTarget::read(&settings).map(|t| t.map(|t| t.sentinels.len()))
        };
        assert_eq!(read("a:26379,b:26379,c:26379").unwrap(), Some(3));
        let err = read("a:26379,b:26379,A:26379").unwrap_err().to_string();
        assert!(
            err.contains("store.redis_sentinels") && err.contains("a:26379 is listed twice"),
            "{err}"
        );
    }

    #[test]
    fn a_password_is_never_printed() {
        let auth = Credentials {
            username: Some("postback".into()),
            password: Some("s3cret".into()),
        };
        let shown = format!("{auth:?}");
        assert!(
            shown.contains("postback") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}

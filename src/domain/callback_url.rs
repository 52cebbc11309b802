//! `CallbackUrl`: where a notification is delivered. Only absolute `http` and `https`
//! URLs with a host are accepted.

use std::fmt;

use url::Url;

use super::FieldError;

const MAX_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackUrl(Url);

impl CallbackUrl {
    /// Validates `raw`; errors are reported against the field `url`.
    pub fn parse(raw: &str) -> Result<Self, FieldError> {
        let fail = |msg: &str| FieldError::new("url", msg);
        if raw.len() > MAX_LEN {
            return Err(fail(&format!("must be at most {MAX_LEN} characters")));
        }
        let url = Url::parse(raw).map_err(|e| fail(&format!("not a valid URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(fail("scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(fail("must name a host"));
        }
        Ok(Self(url))
    }

    /// The host, used as the default rate-limit key.
    pub fn host(&self) -> &str {
        self.0.host_str().unwrap_or_default()
    }
}

impl fmt::Display for CallbackUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https() {
        for ok in [
            "http://example.com/cb",
            "https://pay.example.com:8443/n?x=1",
        ] {
            assert!(CallbackUrl::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_other_schemes_and_garbage() {
        for bad in [
            "ftp://example.com",
            "file:///etc/passwd",
            "example.com",
            "",
            "http://",
            "mailto:a@b.c",
        ] {
            let err = CallbackUrl::parse(bad).unwrap_err();
            assert_eq!(err.field, "url", "{bad}");
        }
        assert!(CallbackUrl::parse(&format!("http://e.com/{}", "a".repeat(3000))).is_err());
    }
}

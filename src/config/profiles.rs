//! `[profiles.<name>]`: a named bundle of a schedule and a success rule, chosen with
//! `profile` on `POST /notify`, so that producers name a provider's conventions instead
//! of repeating them. A few ship built in (`default_profiles`), from the providers'
//! public documentation of how a merchant's receiver acknowledges a notification.

use std::collections::BTreeMap;

use anyhow::anyhow;
use serde::{Deserialize, Serialize};

use crate::domain::{RawSuccess, Schedule, SuccessRule};

/// A profile as configured: the name of a `[schedules]` entry and a success rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSettings {
    #[serde(default = "default_schedule")]
    pub schedule: String,
    #[serde(default)]
    pub success: RawSuccess,
}

fn default_schedule() -> String {
    "default".into()
}

/// A profile ready to apply: its schedule and success rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub schedule: Schedule,
    pub success: SuccessRule,
}

/// The profiles that ship: Alipay's receivers answer the text `success`; WeChat Pay's
/// (API v3) answer 200 or 204; its API v2 receivers answer XML with `return_code`
/// `SUCCESS`; Adyen's answer `[accepted]`.
pub fn default_profiles() -> BTreeMap<String, ProfileSettings> {
    let profile = |schedule: &str, success: RawSuccess| ProfileSettings {
        schedule: schedule.into(),
        success,
    };
    BTreeMap::from([
        (
            "alipay".into(),
            profile(
                "alipay",
                RawSuccess {
                    body_equals: Some("success".into()),
                    ..RawSuccess::default()
                },
            ),
        ),
        (
            "wechatpay".into(),
            profile(
                "wechatpay",
                RawSuccess {
                    status: Some(vec![200, 204]),
                    ..RawSuccess::default()
                },
            ),
        ),
        (
            "wechatpay_v2".into(),
            profile(
                "wechatpay",
                RawSuccess {
                    body_matches: Some(
                        r"<return_code>\s*(<!\[CDATA\[)?SUCCESS(\]\]>)?\s*</return_code>".into(),
                    ),
                    ..RawSuccess::default()
                },
            ),
        ),
        (
            "adyen".into(),
            profile(
                "default",
                RawSuccess {
                    body_equals_ignoring_case: Some("[accepted]".into()),
                    ..RawSuccess::default()
                },
            ),
        ),
    ])
}

/// Every profile, its schedule looked up in `schedules` and its rule checked; an error
/// names the key (`profiles.alipay.success.body_matches`).
pub fn profiles(
    settings: &BTreeMap<String, ProfileSettings>,
    schedules: &BTreeMap<String, Schedule>,
) -> anyhow::Result<BTreeMap<String, Profile>> {
    let mut out = BTreeMap::new();
    for (name, p) in settings {
        let key = format!("profiles.{name}");
        let schedule = schedules.get(&p.schedule).cloned().ok_or_else(|| {
            anyhow!(
                "{key}.schedule: no schedule named `{}` in [schedules]",
                p.schedule
            )
        })?;
        let success = SuccessRule::parse(p.success.clone(), &format!("{key}.success"))
            .map_err(|e| anyhow!("{}: {}", e.field, e.message))?;
        out.insert(name.clone(), Profile { schedule, success });
    }
    Ok(out)
}

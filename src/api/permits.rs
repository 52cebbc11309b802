//! What each protected route does (`access::Action`), in one table: the authentication
//! middleware (`auth::authorize`) asks it before any handler runs, so a caller whose
//! roles do not grant every action of a route is refused (`403 forbidden`) before
//! anything is looked up, and a route the table does not name is refused to every
//! caller. Only what a body asks beyond the route's actions (a replay to another URL, a
//! new schedule: `auth::require_changes`) is asked by the handler that reads it, and
//! what a resend asks by the state of what it resends (`RESEND`: a dead one is revived
//! as a replay would, a cancelled one has its cancel undone). `actions`, what a caller
//! may do with one notification now, is what the lifecycle takes in its state and these
//! tables let the caller ask.

use axum::http::Method;

use crate::lifecycle::Operation;
use crate::store::{FinishedStates, JobState, JobStatus};
use crate::tenancy::access::{Action, Principal};

use Action::*;

/// Every protected route (method and path pattern) and the actions it needs.
const TABLE: &[(&str, &str, &[Action])] = &[
    ("GET", "/me", &[]),
    ("POST", "/notify", &[Register]),
    ("POST", "/notify/batch", &[Register]),
    ("POST", "/events", &[Register]),
    ("POST", "/events/batch", &[Register]),
    ("GET", "/notifications/{id}", &[Lookup]),
    ("GET", "/notifications", &[Read]),
    ("GET", "/dead-letters", &[Read]),
    ("GET", "/dead-letters/{id}", &[Read]),
    ("GET", "/stats", &[Read]),
    ("GET", "/overview", &[Read]),
    ("GET", "/endpoints", &[Read]),
    ("GET", "/endpoints/{id}", &[Read]),
    ("GET", "/subscriptions", &[Read]),
    ("GET", "/subscriptions/{id}", &[Read]),
    ("GET", "/events", &[Read]),
    ("GET", "/events/{id}", &[Read]),
    ("GET", "/topics", &[Read]),
    ("GET", "/audit", &[Audit]),
    ("POST", "/portal-links", &[IssueLink]),
    ("POST", "/notifications/{id}/resend", &[Resend]),
    ("POST", "/notifications/{id}/attempt-now", &[Resend]),
    ("POST", "/notifications/resend", &[Resend, Bulk]),
    ("POST", "/events/{id}/resend", &[Resend, Bulk]),
    ("DELETE", "/notifications/{id}", &[Cancel]),
    ("POST", "/dead-letters/{id}/replay", &[Replay]),
    ("POST", "/dead-letters/replay", &[Replay, Bulk]),
    ("DELETE", "/dead-letters/{id}", &[Discard]),
    ("POST", "/dead-letters/purge", &[Discard, Bulk]),
    ("POST", "/endpoints/{id}/pause", &[Pause]),
    ("POST", "/endpoints/{id}/resume", &[Pause]),
    ("POST", "/subscriptions", &[Subscriptions]),
    ("PATCH", "/subscriptions/{id}", &[Subscriptions]),
    ("DELETE", "/subscriptions/{id}", &[Subscriptions]),
];

/// What resending a finished notification needs, by the state it finished in: a
/// delivered one `resend`; a dead one is brought back as a replay brings it back, and a
/// cancelled one has an operator's cancel undone, so each needs what that needs too.
const RESEND: [(JobState, &[Action]); 3] = [
    (JobState::Delivered, &[Resend]),
    (JobState::Dead, &[Resend, Replay]),
    (JobState::Cancelled, &[Resend, Cancel]),
];

/// The actions resending a notification in `state` needs (none for one that has not
/// finished, which is not resent).
pub fn to_resend(state: JobState) -> &'static [Action] {
    RESEND
        .iter()
        .find(|(finished, _)| *finished == state)
        .map_or(&[], |(_, needs)| needs)
}

/// The states of the finished notifications `caller` may resend: those whose every
/// action (`RESEND`) its roles grant. What a resend takes back (`Again::Resend`), and
/// what `GET /me` tells the review page.
pub fn resendable(caller: &Principal) -> FinishedStates {
    let granted = RESEND
        .iter()
        .filter(|(_, needs)| needs.iter().all(|a| caller.may(*a)));
    FinishedStates::of(granted.map(|(state, _)| *state))
}

/// The actions a call of `method` on the route `path` (its pattern, as
/// `/notifications/{id}`) needs, every one of them; `None` for a route not in the table.
pub fn needs(method: &Method, path: &str) -> Option<&'static [Action]> {
    route_needs(method.as_str(), path)
}

fn route_needs(method: &str, path: &str) -> Option<&'static [Action]> {
    TABLE
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .map(|(_, _, needs)| *needs)
}

/// The route that asks each operation of one notification.
const OPERATIONS: [(Operation, &str, &str); 5] = [
    (Operation::Cancel, "DELETE", "/notifications/{id}"),
    (
        Operation::AttemptNow,
        "POST",
        "/notifications/{id}/attempt-now",
    ),
    (Operation::Resend, "POST", "/notifications/{id}/resend"),
    (Operation::Replay, "POST", "/dead-letters/{id}/replay"),
    (Operation::Discard, "DELETE", "/dead-letters/{id}"),
];

/// What `caller` may do with a notification as `status` shows it now: each operation
/// the lifecycle takes in its state (`Operation::applies`) whose route the caller's roles
/// open, a resend only of a state it may resend (`to_resend`). The `actions` of
/// `GET /notifications/{id}` and `GET /dead-letters/{id}`, which the review page (a
/// portal link's included) offers, and no other.
pub fn actions(caller: &Principal, status: &JobStatus) -> Vec<Operation> {
    let grants = |needs: &[Action]| needs.iter().all(|a| caller.may(*a));
    OPERATIONS
        .iter()
        .filter(|(op, method, path)| {
            op.applies(status)
                && route_needs(method, path).is_some_and(grants)
                && (*op != Operation::Resend || grants(to_resend(status.state)))
        })
        .map(|(op, _, _)| *op)
        .collect()
}

/// The routes `caller` may call, as `METHOD /pattern` (`POST /dead-letters/{id}/replay`):
/// those whose every action its roles grant. What `GET /me` tells the review page, which
/// offers a control only when the route it calls is among them.
pub fn open_to(caller: &Principal) -> Vec<String> {
    TABLE
        .iter()
        .filter(|(_, _, needs)| needs.iter().all(|a| caller.may(*a)))
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerSettings;

    #[test]
    fn every_protected_route_is_in_the_table() {
        let (_, doc) = super::super::protected_routes(&ServerSettings::default()).split_for_parts();
        let mut seen = 0;
        for (path, item) in &doc.paths.paths {
            let operations = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, _) in operations.iter().filter(|(_, op)| op.is_some()) {
                assert!(
                    needs(method, path).is_some(),
                    "{method} {path} is not in the table"
                );
                seen += 1;
            }
        }
        assert!(seen > 30, "{seen} routes");
        assert_eq!(needs(&Method::GET, "/nowhere"), None);
    }

    #[test]
    fn a_caller_is_told_the_routes_its_roles_open_and_no_other() {
        use crate::tenancy::access::LinkRole;
        let tenant = crate::domain::Tenant::parse("shop-a", "tenant").unwrap();
        let roles = [LinkRole::Read, LinkRole::Replay];
        let link = Principal::link(tenant, &roles, crate::clock::system_now());
        let reads = [
            "/notifications",
            "/dead-letters",
            "/dead-letters/{id}",
            "/stats",
            "/overview",
            "/endpoints",
            "/endpoints/{id}",
            "/subscriptions",
            "/subscriptions/{id}",
            "/events",
            "/events/{id}",
            "/topics",
        ];
        let mut want: Vec<String> = reads.iter().map(|p| format!("GET {p}")).collect();
        want.extend(
            [
                "GET /me",
                "GET /notifications/{id}",
                "POST /dead-letters/{id}/replay",
            ]
            .map(String::from),
        );
        let mut open = open_to(&link);
        open.sort();
        want.sort();
        assert_eq!(open, want);
        let everything = open_to(&Principal::everything("ops"));
        assert_eq!(everything.len(), TABLE.len());
    }

    #[test]
    fn a_resend_needs_what_reviving_its_state_needs() {
        use crate::tenancy::access::LinkRole;
        let tenant = crate::domain::Tenant::parse("shop-a", "tenant").unwrap();
        let at = crate::clock::system_now();
        let operate = Principal::link(tenant.clone(), &[LinkRole::Operate], at);
        let states = |p: &Principal| resendable(p).states().collect::<Vec<_>>();
        assert_eq!(states(&operate), [JobState::Delivered]);
        let replay = [LinkRole::Operate, LinkRole::Replay];
        let replay = Principal::link(tenant.clone(), &replay, at);
        assert_eq!(states(&replay), [JobState::Delivered, JobState::Dead]);
        let cancel = Principal::link(tenant, &[LinkRole::Replay, LinkRole::Cancel], at);
        assert_eq!(states(&cancel), [], "nothing without `resend`");
        let everything = Principal::everything("ops");
        assert_eq!(resendable(&everything), FinishedStates::ALL);
        assert_eq!(to_resend(JobState::Cancelled), [Resend, Cancel]);
        assert_eq!(to_resend(JobState::Scheduled), []);
    }

    /// A caller of random roles, a configured token's or a portal link's.
    fn caller() -> impl proptest::strategy::Strategy<Value = Principal> {
        use crate::tenancy::access::{LinkRole, Role, Scope};
        use proptest::prelude::*;
        let tenant = crate::domain::Tenant::parse("shop-a", "tenant").unwrap();
        let token = prop::sample::subsequence(Role::ALL.to_vec(), 0..=Role::ALL.len())
            .prop_map(|roles| Principal::new("t", Scope::All, &roles));
        let link = prop::sample::subsequence(LinkRole::ALL.to_vec(), 0..=LinkRole::ALL.len())
            .prop_map(move |roles| {
                Principal::link(tenant.clone(), &roles, crate::clock::system_now())
            });
        prop_oneof![token, link]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Each action offered, asked through its route's permits and carried out by its
        /// transition, is taken; each not offered is refused by the permits or changes
        /// nothing in the lifecycle.
        #[test]
        fn actions_are_what_the_lifecycle_takes_and_the_permits_let_the_caller_ask(
            r in crate::lifecycle::properties::reached(),
            caller in caller(),
        ) {
            use crate::lifecycle::transitions::{self, Again, NewCycle};
            use crate::lifecycle::{LetGo, Now};
            use super::super::auth;
            let now = Now::from_micros(1_800_000_000_000_000);
            let status = r.status();
            let offered = actions(&caller, &status);
            let again = |which| {
                let cycle = NewCycle { which, delay_ms: 0, schedule: None, url: None };
                transitions::again(&r, &cycle, now).is_some()
            };
            let ops = [
                (Operation::Cancel, Method::DELETE, "/notifications/{id}"),
                (Operation::AttemptNow, Method::POST, "/notifications/{id}/attempt-now"),
                (Operation::Resend, Method::POST, "/notifications/{id}/resend"),
                (Operation::Replay, Method::POST, "/dead-letters/{id}/replay"),
                (Operation::Discard, Method::DELETE, "/dead-letters/{id}"),
            ];
            for (op, method, path) in ops {
                let route = needs(&method, path).expect("a route of the table");
                let mut permitted = route.iter().all(|a| auth::require(&caller, *a).is_ok());
                let taken = match op {
                    Operation::Cancel => transitions::cancel(&r, now).1.is_some(),
                    Operation::AttemptNow => transitions::attempt_now(&r, now, LetGo::Now).is_some(),
                    Operation::Resend => {
                        permitted &= auth::require_to_resend(&caller, r.state).is_ok();
                        again(Again::Resend(resendable(&caller)))
                    }
                    Operation::Replay => again(Again::Replay),
                    Operation::Discard => transitions::discardable(&r),
                };
                proptest::prop_assert_eq!(
                    offered.contains(&op),
                    permitted && taken,
                    "{:?} on {:?} to {:?}", op, r, caller.roles()
                );
            }
        }
    }

    /// The review page names the route each control calls and each view reads, written
    /// out (`allowed("POST /dead-letters/replay")`, `reads: "GET /audit"`, or a choice of
    /// two such); each must be a route of the table, or the page would never offer it.
    #[test]
    fn every_route_the_page_names_is_in_the_table() {
        let page = include_str!("../../ui/app.js");
        let asks = regex::Regex::new(r#"(allowed\s*\(|reads\s*:)((?:"[^"]*"|[^"),}])*)"#).unwrap();
        let quoted = regex::Regex::new(r#""([^"]*)""#).unwrap();
        let choice = regex::Regex::new(r"^[\s\w.!?:]*$").unwrap();
        let mut named = 0;
        for ask in asks.captures_iter(page) {
            let argument = ask[2].trim();
            if argument == "null" || argument == "v.reads" {
                continue;
            }
            let rest = quoted.replace_all(argument, "");
            let routes: Vec<&str> = quoted
                .captures_iter(argument)
                .map(|c| c.get(1).unwrap().as_str())
                .collect();
            assert!(
                !routes.is_empty() && choice.is_match(&rest),
                "the page asks for `{}`, not a route written out",
                &ask[0]
            );
            for route in routes {
                let (method, path) = route.split_once(' ').unwrap_or_default();
                let method: Method = method.parse().unwrap();
                assert!(
                    needs(&method, path).is_some(),
                    "the page names {route}, not a route"
                );
                named += 1;
            }
        }
        assert!(named >= 16, "{named} routes named by the page");
        // The actions the page offers from a view's `actions`: each one a view names.
        let names: Vec<serde_json::Value> = Operation::ALL
            .map(|op| serde_json::to_value(super::super::view::ActionView::from(op)).unwrap())
            .to_vec();
        let offers = regex::Regex::new(r#"offers\(\w+, "([^"]*)"\)"#).unwrap();
        let offered: Vec<&str> = offers
            .captures_iter(page)
            .map(|c| c.get(1).unwrap().as_str())
            .collect();
        for action in &offered {
            assert!(
                names.contains(&(*action).into()),
                "the page offers `{action}`, not an action"
            );
        }
        assert_eq!(
            offered.len(),
            names.len(),
            "each action offered once: {offered:?}"
        );
        let any_route = regex::Regex::new(r#""([A-Z]+) /[^"]*""#).unwrap();
        for m in any_route.captures_iter(page) {
            let method = &m[1];
            assert!(
                ["GET", "POST", "PATCH", "DELETE"].contains(&method),
                "{}",
                &m[0]
            );
        }
    }
}

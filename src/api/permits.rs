//! What each protected route does (`access::Action`), in one table: the authentication
//! middleware (`auth::authorize`) asks it before any handler runs, so a caller whose
//! roles do not grant every action of a route is refused (`403 forbidden`) before
//! anything is looked up, and a route the table does not name is refused to every
//! caller. Only what a body asks beyond the route's actions (a replay to another URL, a
//! new schedule: `auth::require_changes`) is asked by the handler that reads it.

use axum::http::Method;

use crate::tenancy::access::Action;

/// The actions a call of `method` on the route `path` (its pattern, as
/// `/notifications/{id}`) needs, every one of them; `None` for a route not in the table.
pub fn needs(method: &Method, path: &str) -> Option<&'static [Action]> {
    use Action::*;
    let needs: &'static [Action] = match (method.as_str(), path) {
        ("GET", "/me") => &[],
        ("POST", "/notify" | "/notify/batch" | "/events" | "/events/batch") => &[Register],
        ("GET", "/notifications/{id}") => &[Lookup],
        (
            "GET",
            "/notifications"
            | "/dead-letters"
            | "/dead-letters/{id}"
            | "/stats"
            | "/overview"
            | "/endpoints"
            | "/endpoints/{id}"
            | "/subscriptions"
            | "/subscriptions/{id}"
            | "/events"
            | "/events/{id}"
            | "/topics",
        ) => &[Read],
        ("GET", "/audit") => &[Audit],
        ("POST", "/portal-links") => &[IssueLink],
        ("POST", "/notifications/{id}/resend" | "/notifications/{id}/attempt-now") => &[Resend],
        ("POST", "/notifications/resend" | "/events/{id}/resend") => &[Resend, Bulk],
        ("DELETE", "/notifications/{id}") => &[Cancel],
        ("POST", "/dead-letters/{id}/replay") => &[Replay],
        ("POST", "/dead-letters/replay") => &[Replay, Bulk],
        ("DELETE", "/dead-letters/{id}") => &[Discard],
        ("POST", "/dead-letters/purge") => &[Discard, Bulk],
        ("POST", "/endpoints/{id}/pause" | "/endpoints/{id}/resume") => &[Pause],
        ("POST", "/subscriptions") | ("PATCH" | "DELETE", "/subscriptions/{id}") => {
            &[Subscriptions]
        }
        _ => return None,
    };
    Some(needs)
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
}

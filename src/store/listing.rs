//! The queue by state, as `GET /notifications` lists it: which index holds each state,
//! in which order it is read, and which notifications of that index a list keeps.
//!
//! Two holds are told apart: `held`, a notification of a paused endpoint, and
//! `held_back`, one its endpoint path's open circuit holds back. A paused endpoint's
//! notifications are held from the pause on (`shown`): the scheduler holds each as it
//! comes due (then it is kept apart in the due index, `HELD_OFFSET_MS` late), but lists,
//! counts and views show every one not waiting behind its ordering key as held at once,
//! what its circuit held back included, from the pauses the list is given (`Paused`).

use std::collections::HashSet;
use std::sync::Arc;

use super::{Cursor, JobState, JobStatus, JobView, ListFilter, WalkCursor};
use crate::domain::endpoint_key as key;
use crate::domain::{Endpoint, Tenant};
use crate::lifecycle::{Index, Now, TenantIndex, HELD_OFFSET_MS, WAITING_OFFSET_MS};

/// Notifications a page examines at most (per shard); past it the page ends early with
/// a cursor, so that a filter matching nothing cannot hold a reader for long. A list of
/// one tenant reads that tenant's own index (`TenantIndex`), so what it examines is
/// that tenant's alone.
pub const MAX_SCAN: usize = 5_000;

/// The endpoints paused as a list or a view sees them (by `endpoints::key`), and their
/// tenants, so that a notification of a tenant without one costs one lookup.
#[derive(Debug, Clone, Default)]
pub struct Paused(Option<Arc<(HashSet<String>, HashSet<Tenant>)>>);

impl Paused {
    /// The endpoints of these keys (`endpoints::key`).
    pub fn of<'k>(keys: impl Iterator<Item = &'k String>) -> Self {
        let keys: HashSet<String> = keys.cloned().collect();
        let tenants = keys
            .iter()
            .filter_map(|k| Tenant::parse(k.rsplit_once(' ')?.0, "tenant").ok())
            .collect();
        Self((!keys.is_empty()).then(|| Arc::new((keys, tenants))))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `tenant`'s endpoint of `url` is paused.
    pub fn holds(&self, tenant: &Tenant, url: &str) -> bool {
        let Some(paused) = &self.0 else { return false };
        let (keys, tenants) = &**paused;
        tenants.contains(tenant)
            && Endpoint::of_text(tenant, url).is_some_and(|e| keys.contains(&key(tenant, &e.id())))
    }

    /// Whether `v`'s endpoint is paused.
    pub fn holds_view(&self, v: &JobView) -> bool {
        self.holds(&v.spec.tenant, &v.spec.url)
    }
}

/// `status` as lists, counts and views show it, its endpoint `paused` or not: a
/// scheduled notification of a paused endpoint, not waiting behind its ordering key, is
/// held from the pause on.
pub fn shown(status: &JobStatus, paused: bool) -> JobStatus {
    let held = status.held || (paused && status.state == JobState::Scheduled && !status.waiting);
    JobStatus {
        held,
        ..status.clone()
    }
}

/// One state of the queue as a list shows it, and the `list` a notification's view says
/// (the API's `ListState`), so that a view and the list it is found in use one word.
/// `Retrying` is `scheduled` after at least one failed attempt; `Scheduled` is the rest
/// of `scheduled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    Scheduled,
    Retrying,
    /// Scheduled and held while its endpoint is paused (`shown`).
    Held,
    /// Scheduled, held back by its endpoint path's open circuit (not paused).
    HeldBack,
    InFlight,
    Delivered,
    Dead,
    Cancelled,
}

impl Listed {
    pub const ALL: [Listed; 8] = [
        Listed::Scheduled,
        Listed::Retrying,
        Listed::Held,
        Listed::HeldBack,
        Listed::InFlight,
        Listed::Delivered,
        Listed::Dead,
        Listed::Cancelled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Listed::Scheduled => "scheduled",
            Listed::Retrying => "retrying",
            Listed::Held => "held",
            Listed::HeldBack => "held_back",
            Listed::InFlight => "in_flight",
            Listed::Delivered => "delivered",
            Listed::Dead => "dead",
            Listed::Cancelled => "cancelled",
        }
    }

    /// Every name, as an error lists them: `scheduled, retrying, …`.
    pub fn names() -> String {
        Self::ALL.map(Listed::name).join(", ")
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == raw)
    }

    /// The list a notification of `status` (as `shown`) is in.
    pub fn of(status: &JobStatus) -> Self {
        match status.state {
            JobState::Scheduled if status.held => Listed::Held,
            JobState::Scheduled if status.circuit_since.is_some() => Listed::HeldBack,
            JobState::Scheduled if status.attempts > 0 => Listed::Retrying,
            JobState::Scheduled => Listed::Scheduled,
            JobState::InFlight => Listed::InFlight,
            JobState::Delivered => Listed::Delivered,
            JobState::Dead => Listed::Dead,
            JobState::Cancelled => Listed::Cancelled,
        }
    }

    /// The state its notifications are in.
    pub fn state(self) -> JobState {
        match self {
            Listed::Scheduled | Listed::Retrying | Listed::Held | Listed::HeldBack => {
                JobState::Scheduled
            }
            Listed::InFlight => JobState::InFlight,
            Listed::Delivered => JobState::Delivered,
            Listed::Dead => JobState::Dead,
            Listed::Cancelled => JobState::Cancelled,
        }
    }

    /// The index that holds its notifications, scored by the time it is ordered by: the
    /// next attempt, the lease's end, or the finish.
    pub fn index(self) -> Index {
        match self {
            Listed::Scheduled | Listed::Retrying | Listed::Held | Listed::HeldBack => Index::Due,
            Listed::InFlight => Index::InFlight,
            Listed::Delivered | Listed::Cancelled => Index::Done,
            Listed::Dead => Index::Dead,
        }
    }

    /// Pending ones are read soonest first, finished ones newest first.
    pub fn soonest_first(self) -> bool {
        matches!(
            self,
            Listed::Scheduled
                | Listed::Retrying
                | Listed::Held
                | Listed::HeldBack
                | Listed::InFlight
        )
    }

    /// The scores of its index a list with `filter` reads: the filter's times, which
    /// for held ones are kept `HELD_OFFSET_MS` later, apart from the rest of the due
    /// index (so that a list of them reads only them, oldest due first). While
    /// endpoints are paused, held ones are also read among the rest (those their
    /// scheduler has not held yet, `shown`), before those kept apart, and the filter's
    /// times are checked on each (`keeps`).
    pub fn scores(self, filter: &ListFilter) -> (Option<i64>, Option<i64>) {
        match self {
            Listed::Held if !filter.paused.is_empty() => (
                filter.since,
                Some(
                    filter
                        .until
                        .map_or(WAITING_OFFSET_MS - 1, |u| HELD_OFFSET_MS + u),
                ),
            ),
            Listed::Held => (
                Some(HELD_OFFSET_MS + filter.since.unwrap_or(0).max(0)),
                Some(
                    filter
                        .until
                        .map_or(WAITING_OFFSET_MS - 1, |u| HELD_OFFSET_MS + u),
                ),
            ),
            _ => (filter.since, filter.until),
        }
    }

    /// The scores a list with `filter` reads of `tenant`'s index, when it reads one
    /// (`None`: the index of every tenant's). In a tenant's pending index the in-flight
    /// ones keep the time they came due, so a tenant's in-flight list is ordered by that
    /// and reads no held or waiting ones.
    pub fn scores_in(
        self,
        filter: &ListFilter,
        tenant: Option<TenantIndex>,
    ) -> (Option<i64>, Option<i64>) {
        match (self, tenant) {
            (Listed::InFlight, Some(TenantIndex::Pending)) => {
                let until = filter.until.unwrap_or(i64::MAX).min(HELD_OFFSET_MS - 1);
                (filter.since, Some(until))
            }
            _ => self.scores(filter),
        }
    }

    /// When a walk whose first page is read at `now` begins: rounded up, as registrations
    /// and returns to `scheduled` are stamped (`Now::up`), so that a notification
    /// registered or moved back earlier in the same millisecond is in the walk. (On a
    /// Redis Cluster the walk reads one node's clock: a node whose clock is behind it
    /// leaves out what was registered on it in that lag.)
    pub fn walk_start(now: Now) -> i64 {
        now.up()
    }

    /// Whether a walk that began at `walk_from` (ms) lists `v`: it is in this list and
    /// matches `filter`, and it was in this state when the walk began. One that came
    /// back to it since (a retry, a deferral, a replay) is left out, so that a walk
    /// returns each notification at most once whatever moves meanwhile (but for one that
    /// moves back within the millisecond the walk began, which the walk counts as before).
    pub fn keeps(self, v: &JobView, filter: &ListFilter, walk_from: i64) -> bool {
        let paused = self.sees_pauses() && filter.paused.holds_view(v);
        let status = shown(&v.status, paused);
        Listed::of(&status) == self
            && status.since() <= walk_from
            && filter.matches(v)
            && (self != Listed::Held || filter.paused.is_empty() || within(&status, filter))
    }

    /// Whether which notifications it holds depends on pauses: the lists of scheduled
    /// notifications.
    fn sees_pauses(self) -> bool {
        self.index() == Index::Due
    }
}

/// Whether `status`'s due time is within `filter`'s times.
fn within(status: &JobStatus, filter: &ListFilter) -> bool {
    let due = status.next_at.unwrap_or(i64::MIN);
    filter.since.is_none_or(|s| due >= s) && filter.until.is_none_or(|u| due <= u)
}

/// A page of one list, in its order.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub items: Vec<JobView>,
    /// Where the next page starts; `None` at the end.
    pub next_cursor: Option<WalkCursor>,
    /// How many notifications the page read to find its items.
    pub examined: usize,
}

impl ListPage {
    /// A page of a walk that began at `walk_from`, whose next page starts after `next`,
    /// found among `examined` notifications.
    pub fn of_walk(
        items: Vec<JobView>,
        next: Option<Cursor>,
        walk_from: i64,
        examined: usize,
    ) -> Self {
        Self {
            items,
            next_cursor: next.map(|position| WalkCursor {
                position,
                walk_from,
            }),
            examined,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_has_a_name_it_is_parsed_from() {
        for l in Listed::ALL {
            assert_eq!(Listed::parse(l.name()), Some(l));
        }
        assert_eq!(Listed::parse("waiting"), None);
    }

    fn scheduled() -> JobStatus {
        let now = Now::from_micros(1_800_000_000_000_000);
        crate::lifecycle::transitions::register(vec![100], now, 0).status()
    }

    #[test]
    fn a_paused_endpoints_scheduled_ones_are_held_and_held_back_ones_apart() {
        let s = scheduled();
        assert_eq!(Listed::of(&shown(&s, false)), Listed::Scheduled);
        assert_eq!(
            Listed::of(&shown(&s, true)),
            Listed::Held,
            "from the pause on"
        );
        let waiting = JobStatus {
            waiting: true,
            ..s.clone()
        };
        assert_eq!(
            Listed::of(&shown(&waiting, true)),
            Listed::Scheduled,
            "behind its key"
        );
        let back = JobStatus {
            circuit_since: Some(1),
            attempts: 1,
            ..s.clone()
        };
        assert_eq!(Listed::of(&shown(&back, false)), Listed::HeldBack);
        assert_eq!(Listed::of(&shown(&back, true)), Listed::Held, "one hold");
        let flying = JobStatus {
            state: JobState::InFlight,
            ..s
        };
        assert_eq!(Listed::of(&shown(&flying, true)), Listed::InFlight);
    }

    #[test]
    fn the_paused_are_known_by_their_endpoints_key() {
        let tenant = Tenant::parse("shop-a", "tenant").unwrap();
        let url = "https://pay.example.com/n";
        let endpoint = Endpoint::of_text(&tenant, url).unwrap();
        let paused = Paused::of([key(&tenant, &endpoint.id())].iter());
        assert!(paused.holds(&tenant, url));
        assert!(
            paused.holds(&tenant, "https://pay.example.com/other"),
            "the origin's"
        );
        assert!(!paused.holds(&tenant, "https://elsewhere.example.com/n"));
        let shop_b = Tenant::parse("shop-b", "tenant").unwrap();
        assert!(
            !paused.holds(&shop_b, url),
            "another tenant's is another endpoint"
        );
        assert!(Paused::default().is_empty() && !Paused::default().holds(&tenant, url));
    }

    #[test]
    fn a_walk_begun_in_the_millisecond_of_a_registration_includes_it() {
        let ms = 1_800_000_000_123_i64;
        for registered in [0, 1, 400, 999] {
            let at = Now::from_micros(ms * 1000 + registered);
            let record = crate::lifecycle::transitions::register(vec![100], at, 0);
            for later in [0, 1, 999 - registered] {
                let walk = Listed::walk_start(Now::from_micros(at.micros() + later));
                assert!(
                    record.created_at <= walk,
                    "{registered} µs, walk {later} µs on"
                );
            }
        }
    }
}
